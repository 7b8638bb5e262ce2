"""``loop.iteration.started`` (spec 003 §8) and a complete ``outcome.meta`` (spec 000 §6:
duration, attempt, timestamps, trace ids), read field by field on the in-memory bus."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events.bus import read_execution_events
from noetl.events.envelope import trace_of

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: iteration_events}
workflow:
  - step: start
    loop:
      in: [10, 20, 30]
      iterator: n
      spec: {mode: MODE, policy: {exec: EXEC}}
    tool:
      - name: t
        kind: noop
        result: "{{ iter.n }}"
        spec:
          policy:
            rules:
              - else:
                  then:
                    set_iter: {seen_trace: "{{ outcome.meta.trace_id }}"}
      - name: u
        kind: noop
        result: "{{ iter.seen_trace }}"
"""


@pytest.mark.parametrize(("mode", "place"), [("sequential", "distributed"), ("parallel", "local")])
async def test_every_iteration_starts_with_loop_iteration_started(
    bus: Any, services: Any, mode: str, place: str
) -> None:
    text = PLAYBOOK.replace("MODE", mode).replace("EXEC", place)
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)
    assert out["status"] == "success", out.get("error")
    events = out["events"]
    started = [e for e in events if e["name"] == "loop.iteration.started"]
    assert sorted(e["payload"]["index"] for e in started) == [0, 1, 2]
    assert Counter(e["entity_type"] for e in started) == {"loop": 3}
    assert all(e["source"] == "worker" and e["entity_id"] == "start" for e in started)
    for i in range(3):  # each before its iteration's first task and its terminal event
        at = {e["name"]: n for n, e in enumerate(events) if (e.get("payload") or {}).get("index") == i}
        assert at["loop.iteration.started"] < at["task.started"] < at["loop.iteration.done"], at


async def test_outcome_meta_has_attempt_duration_timestamps_task_and_trace_id(
    bus: Any, services: Any
) -> None:
    text = PLAYBOOK.replace("MODE", "sequential").replace("EXEC", "distributed")
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)
    events = await read_execution_events(bus, out["execution_id"])
    trace = trace_of(events[0])  # the execution id unless the request carried a trace of its own
    assert trace
    done = [e for e in events if e["name"] == "task.done"]
    assert len(done) == 6
    for e in done:
        meta = e["payload"]["outcome"]["meta"]
        # a trace that is the execution id is not written, as in the envelope (trace_of gives it)
        assert set(meta) == {"attempt", "duration_ms", "started_at", "ended_at", "task"}, meta
        assert meta["attempt"] == 1 and meta["task"] == e["payload"]["task"]
        assert isinstance(meta["duration_ms"], float) and meta["duration_ms"] >= 0
        assert meta["started_at"] <= meta["ended_at"]  # ISO 8601 UTC: text order is time order
        assert trace == trace_of(e)
    assert out["result"] == [trace, trace, trace]  # a rule reads outcome.meta.trace_id


async def test_a_trace_of_its_own_is_written_in_outcome_meta(bus: Any, services: Any) -> None:
    text = PLAYBOOK.replace("MODE", "sequential").replace("EXEC", "local")
    trace = "trace-" + uuid.uuid4().hex
    out = await run_and_wait(
        bus, {"request_id": uuid.uuid4().hex, "playbook": text, "trace_id": trace}, timeout=30
    )
    events = await read_execution_events(bus, out["execution_id"])
    done = [e for e in events if e["name"] == "task.done"]
    assert done and all(e["payload"]["outcome"]["meta"]["trace_id"] == trace for e in done)
    assert out["result"] == [trace] * 3
