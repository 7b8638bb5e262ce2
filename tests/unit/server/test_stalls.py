"""The stall detector (issue 25: no execution without an end): a running execution with no event
for a while that waits for nothing declared is flagged in `noetl status`, the API, the console and
a metric, with the reason the log and the runtime registry give."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from noetl.client.run import submit
from noetl.client.stalls import assess
from noetl.events.bus import read_execution_events
from noetl.events.memory import MemoryBus
from noetl.server.api.launch import start_operations
from noetl.server.api.queries import execution_status, list_executions, stall_counts
from tests.support import running, until

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def _event(name: str, age_s: float, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "timestamp": (NOW - timedelta(seconds=age_s)).isoformat(),
        "entity_id": "work",
        "source": extra.pop("source", "server"),
        "payload": extra,
    }


def test_what_is_a_stall_and_what_is_not() -> None:
    young = _event("step.scheduled", 5)
    assert assess(young, NOW, after_s=60) is None
    old = _event("step.scheduled", 300)
    assert assess(old, NOW, after_s=60, waiting=True) is None  # waits for a declared signal
    assert assess(old, NOW, after_s=60, paused=True) is None
    queued = assess(old, NOW, after_s=60, step_pool="gpu", live_pools={"default"})
    assert queued is not None and queued["state"] == "queued" and "pool 'gpu'" in queued["reason"], queued
    undecided = assess(_event("step.done", 300, source="worker"), NOW, after_s=60)
    assert undecided is not None and undecided["state"] == "stalled"
    assert "no server has decided" in undecided["reason"], undecided
    gone = assess(_event("task.started", 300, worker="w1"), NOW, after_s=60, live_workers={"w2"})
    assert gone is not None and "which is gone" in gone["reason"], gone
    long_task = assess(_event("task.started", 300, worker="w2"), NOW, after_s=60, live_workers={"w2"})
    assert long_task is not None and "timeout_s" in long_task["reason"], long_task


GPU = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: gpu, path: tests/gpu}
workflow:
  - step: start
    spec: {pool: gpu}
    tool: {kind: noop}
"""

SLOW = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow, path: tests/slow}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import time
        def main():
            time.sleep(0.5)
            return 1
"""


async def test_a_queued_and_a_stalled_execution_are_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STALL_AFTER_S", "0.3")
    bus = MemoryBus()
    try:
        async with running(bus) as (server, worker):
            ops = await start_operations(bus, "worker", worker, heartbeat=0.2, ttl=5.0)
            try:
                queued = await submit(bus, {"request_id": uuid.uuid4().hex, "playbook": GPU})

                async def reported() -> Any:
                    out = await execution_status(bus, queued)
                    return out if out and out["stalled"] else None

                out = await until(reported, 10)
                stalled = out["stalled"]
                assert stalled["state"] == "queued" and "gpu" in stalled["reason"], stalled
                listed = {e["execution_id"]: e for e in (await list_executions(bus))["executions"]}
                assert listed[queued]["stalled"]["state"] == "queued", listed[queued]
                s_ops = await start_operations(bus, "server", server, http_port=0, insecure=True)
                try:
                    assert s_ops.api is not None
                    async with httpx.AsyncClient(base_url=s_ops.api.url, timeout=10) as http:
                        page = (await http.get(f"/ui/executions/{queued}")).text
                        assert 'id="stalled"' in page and "pool &#39;gpu&#39;" in page, page[:2000]
                        listing = (await http.get("/ui/executions")).text
                        assert ">queued</span>" in listing, listing[:2000]
                        metrics = (await http.get("/metrics")).text
                        assert 'noetl_executions_stalled{state="queued"} 1' in metrics, metrics
                finally:
                    await s_ops.stop()
                # a server gone while a task runs: the worker's step.done is never decided
                slow = await submit(bus, {"request_id": uuid.uuid4().hex, "playbook": SLOW})
                await until(lambda: _last_is(bus, slow, "task.started"), 10)
                await server.stop()
                out = await until(lambda: _stalled(bus, slow), 10)
                assert out["state"] == "stalled" and "no server has decided" in out["reason"], out
                counts = await stall_counts(bus, [queued, slow])
                assert counts == {"queued": 1, "stalled": 1}, counts
            finally:
                await ops.stop()
    finally:
        await bus.close()


async def _last_is(bus: Any, eid: str, name: str) -> bool:
    events = await read_execution_events(bus, eid)
    return bool(events) and events[-1]["name"] == name


async def _stalled(bus: Any, eid: str) -> Any:
    out = await execution_status(bus, eid)
    return out["stalled"] if out and out["stalled"] and out["stalled"]["last_event"] == "step.done" else None
