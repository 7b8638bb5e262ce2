"""Golden histories: real executions recorded by ``tests/golden/record.py``, replayed here.

Folding a recorded log twice must give the same state, and the engine must regenerate every
decision the server recorded: the same ids, names, statuses and payloads, in log order. A change
to the engine that changes a decision shows up here as a diff (re-record only on purpose).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.engine import fold, replay
from noetl.events.envelope import Event

HERE = Path(__file__).resolve().parent
GOLDEN = sorted(HERE.glob("*.json"))


def _load(path: Path) -> list[Event]:
    return json.loads(path.read_text())


def _decision(e: Event) -> tuple[Any, ...]:
    return (
        e["event_id"],
        e["name"],
        e["status"],
        e.get("step_run_id"),
        json.dumps(e["payload"], sort_keys=True),
    )


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_fold_twice_gives_the_same_state(path: Path) -> None:
    events = _load(path)
    a, b = fold(events), fold(events)
    assert a is not None and b is not None and a.finished
    for st in (a, b):
        assert st.status == "success"
    assert (a.status, a.result, a.ctx, a.run_counter, sorted(a.runs)) == (
        b.status,
        b.result,
        b.ctx,
        b.run_counter,
        sorted(b.runs),
    )
    finished = next(e for e in events if e["name"] == "workflow.finished")
    assert a.ctx == finished["payload"]["ctx"] and a.result == finished["payload"]["result"]


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_replay_regenerates_every_recorded_decision(path: Path) -> None:
    events = _load(path)
    _, decisions = replay(events)
    regenerated = [_decision(e) for d in decisions for e in d.events]
    recorded = [
        _decision(e)
        for e in events
        if e["source"] == "server" and e["name"] != "playbook.execution.requested"
    ]
    assert regenerated == recorded


def test_there_are_golden_histories() -> None:
    assert len(GOLDEN) >= 4
