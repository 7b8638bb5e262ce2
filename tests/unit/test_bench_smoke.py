"""The benchmark package imports and its playbooks are valid; no timing here (that is bench/'s job)."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from bench import io_loops, playbooks
from bench.__main__ import SCENARIOS
from bench.record import Recorder, percentile
from noetl.dsl import validate_text

MODULES = [
    *SCENARIOS,
    *["__main__", "cluster", "common", "config", "goals", "hotpath", "record", "report", "peers.restate"],
]


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
        playbooks.tiny_loop(10, exec_="local"),
        playbooks.tiny_loop(10, exec_="distributed", max_in_flight=50),
        io_loops.http_loop(10, "http://127.0.0.1:1/", "local"),
        io_loops.pg_loop(10, "distributed"),
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


def test_peer_goals_read_what_peers_records() -> None:
    """A peer's three shapes reach its three goal rows; a renamed metric would leave them n/a."""
    from bench import peers, report

    rec = Recorder()
    rec.add("chain", "ms_per_step", 1.0, "ms")
    rec.add("loop", "par64_iter_per_s", 4000.0, "it/s", higher=True)
    rec.add("fanout", "steps_per_s", 3000.0, "steps/s", higher=True)
    figures = {"temporal": (30.0, 400.0, 150.0), "prefect": (0.5, 200.0, 25.0)}  # chain, loop, fan-out
    for peer, (chain, loop, fanout) in figures.items():
        peers.record(
            rec, peer, {"chain_ms_per_step": [chain], "loop_per_s": [loop], "fanout_steps_per_s": [fanout]}
        )
    got = {}
    for text, measured, _target, _unit, verdict in report.goal_rows(rec):
        if text.startswith("ahead of "):  # "ahead of PEER: SHAPE (...)"
            peer, rest = text.removeprefix("ahead of ").split(": ", 1)
            got[f"{peer}:{rest.split()[0]}"] = (measured, verdict)
    assert got == {
        "temporal:chain": ("30.0", "met"),
        "temporal:loop": ("10.0", "met"),
        "temporal:fan-out": ("20.0", "met"),
        "prefect:chain": ("0.50", "NOT met"),
        "prefect:loop": ("20.0", "met"),
        "prefect:fan-out": ("120", "met"),
    }


def test_prefect_database_falls_back_to_sqlite_without_postgres() -> None:
    from bench import peers
    from noetl.host.natsserver import free_port

    with peers.prefect_database(f"postgresql://postgres@127.0.0.1:{free_port()}/none") as (url, backend):
        assert url is None and backend.startswith("SQLite (no PostgreSQL")


@pytest.mark.postgres
def test_prefect_database_is_fresh_and_dropped(pg_dsn: str) -> None:
    import asyncio
    import uuid

    import asyncpg

    from bench import peers

    async def exists(name: str) -> bool:
        conn = await asyncpg.connect(pg_dsn, timeout=3)
        try:
            return bool(await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name))
        finally:
            await conn.close()

    name = f"noetl_test_bench_{uuid.uuid4().hex[:8]}"
    with peers.prefect_database(pg_dsn, name) as (url, backend):
        if url is None:
            pytest.skip(f"PostgreSQL unreachable: {backend}; set NOETL_TEST_PG_DSN")
        assert backend == "PostgreSQL"
        assert url.startswith("postgresql+asyncpg://") and url.endswith(f"/{name}")
        assert asyncio.run(exists(name))
    assert not asyncio.run(exists(name))


def test_no_figure_from_a_failed_execution() -> None:
    """A rejected request finishes in microseconds: its time must never become a rate."""
    from bench.common import FinishWatch

    watch = FinishWatch(nc=None)
    watch.finished["ok"] = (1.5, {"status": "success"})
    watch.finished["bad"] = (0.1, {"status": "failed", "error": {"kind": "request_invalid"}})
    assert watch.succeeded("ok") == 1.5
    with pytest.raises(RuntimeError, match=r"ended failed: .*request_invalid"):
        watch.succeeded("bad")


def test_restate_goals_compare_with_the_faster_sdk() -> None:
    """Each shape is judged against the better of Restate's two SDKs, in the right direction."""
    from bench import report

    rec = Recorder()
    figures = (("noetl", 1.0, 3000.0), ("restate_ts", 1.1, 6000.0), ("restate_py", 1.3, 3500.0))
    for who, chain, conc in figures:
        rec.add("shapes", f"{who}_chain_ms_per_step", chain, "ms")
        rec.add("shapes", f"{who}_conc_steps_per_s", conc, "steps/s", higher=True)
    got = {
        text.split(": ", 1)[1].split(" (")[0]: (measured, verdict)
        for text, measured, _target, _unit, verdict in report.goal_rows(rec)
        if text.startswith("vs restate")
    }
    assert got["chain of 50 steps"] == ("1.10", "met")
    assert got["50 x 20-step workflows at once"] == ("0.50", "NOT met")
    assert got["one-step workflow"][1] == "n/a"


def test_restate_config_turns_fsync_off_only_when_asked() -> None:
    from bench.peers.restate import _config

    ports = {"fabric": 1, "ingress": 2, "admin": 3}
    off, on = _config(Path("/x"), ports, fsync=False), _config(Path("/x"), ports, fsync=True)
    assert off.count("rocksdb-disable-wal-fsync = true") == 2 and "disable-wal-fsync" not in on
    assert '"127.0.0.1:2"' in on and "127.0.0.1:3" in on
