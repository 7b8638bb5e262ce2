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
