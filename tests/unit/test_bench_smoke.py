"""The benchmark package imports and its playbooks are valid; no timing here (that is bench/'s job)."""

from __future__ import annotations

import importlib

import pytest

from bench import playbooks
from bench.__main__ import SCENARIOS
from bench.record import Recorder, percentile
from noetl.dsl import validate_text

MODULES = [*SCENARIOS, "__main__", "cluster", "common", "config", "goals", "hotpath", "record", "report"]


@pytest.mark.parametrize("name", MODULES)
def test_bench_module_imports(name: str) -> None:
    mod = importlib.import_module(f"bench.{name}")
    if name in SCENARIOS:
        assert callable(mod.run)


@pytest.mark.parametrize(
    "text",
    [
        playbooks.chain(1),
        playbooks.chain(100),
        playbooks.loop(10, parallel=True, max_in_flight=64),
        playbooks.loop(10, parallel=False),
        playbooks.three_step(),
        playbooks.one_step(),
    ],
)
def test_generated_playbooks_validate(text: str) -> None:
    assert validate_text(text, "<bench>") == []


def test_table_renders_without_numbers() -> None:
    from bench import report

    rec = Recorder()
    rec.add("floor", "hop_p50", 1.0, "ms")
    rec.note("peers", "temporal: no numbers: not installed")
    text = report.render_text(rec)
    assert "hop_p50" in text and "n/a" in text and "not installed" in text
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0 and percentile([1.0, 2.0], 99) == 2.0


def test_hotpath_report_shows_every_process_cpu_per_unit() -> None:
    from collections import Counter

    from bench.hotpath import analyze, report

    raw = "main (cli/main.py:1);Pipeline.run (worker/pipeline.py:9) 3\nmain (cli/main.py:1) 1\n"
    total, cats, incl = analyze(raw)
    assert total == 4 and incl["Pipeline.run (task loop)"] == 3
    meta = {
        "shape": "loop",
        "iterations": 1000,
        "max_in_flight": 64,
        "wall": 2.0,
        "rate": 250,
        "cpu": {"nats-server": 0.5, "server": 0.25, "worker": 1.0},
    }
    msgs = {"noetl-worker": {"in_msgs": 7.0, "out_msgs": 2.0, "in_bytes": 3000.0}}
    profiles = {"worker": {"samples": total, "categories": cats, "inclusive": Counter(incl)}}
    text = report(meta, msgs, profiles)
    assert "| nats-server | 0.50 | 25 % | 500 |" in text
    assert "| all | 1.75 | 88 % | 1750 |" in text
    assert "| noetl-worker | 7.0 | 3000 | 2.0 |" in text
