"""Time limits and signals (SEMANTICS §16, §17), server and worker on the in-memory bus: its
message scheduling fires the timers as JetStream's does. The same through HTTP, the NATS service
and the CLI, and a timer surviving a killed server, run over real nats-servers
(tests/service/test_outside.py, tests/faults/test_time.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from noetl.client.run import finished_event, signal, submit
from noetl.events.bus import read_execution_events
from tests.service.test_outside import APPROVAL, EXECUTION_LIMIT, TIMEOUT
from tests.support import until


async def start(bus: Any, text: str) -> str:
    return await submit(bus, {"request_id": uuid.uuid4().hex, "playbook": text, "payload": {}})


async def finished(bus: Any, eid: str) -> dict[str, Any]:
    ev = await until(lambda: finished_event(bus, eid))
    return dict(ev["payload"])


async def _has(bus: Any, eid: str, name: str) -> bool:
    return any(e["name"] == name for e in await read_execution_events(bus, eid))


async def test_a_signal_sent_early_waits_in_the_queue(bus: Any, services: Any) -> None:
    text = APPROVAL.replace(
        "next: {arcs: [{step: approve}]}",
        'tool: [{name: w, kind: python, code: "import time\\ndef main():\\n    time.sleep(0.5)"}]\n'
        "    next: {arcs: [{step: approve}]}",
    )
    eid = await start(bus, text)
    await until(lambda: _has(bus, eid, "step.started"))
    out = await signal(bus, eid, "approval", {"approved": True})
    assert out["signal"] == "sent", out
    assert (await finished(bus, eid))["result"] == "shipped"


async def test_step_timeout_routes_and_the_worker_stops_the_task(bus: Any, services: Any) -> None:
    began = time.monotonic()
    eid = await start(bus, TIMEOUT)
    fin = await finished(bus, eid)
    assert fin["status"] == "success" and fin["result"] == "routed"
    assert time.monotonic() - began < 10
    events = await read_execution_events(bus, eid)
    failed = [e for e in events if e["name"] == "step.failed" and e["entity_id"] == "start"]
    assert failed[0]["source"] == "server" and failed[0]["payload"]["error"]["kind"] == "step_timeout"
    assert "step.cancelled" in [e["name"] for e in events]
    # the worker was interrupted: its own terminal event comes at once, not after the 30 s sleep
    await until(lambda: _worker_ended(bus, eid), timeout=5)


async def _worker_ended(bus: Any, eid: str) -> bool:
    events = await read_execution_events(bus, eid)
    return any(e["name"] == "step.failed" and e["source"] == "worker" for e in events)


async def test_execution_time_limit_fails_the_execution(bus: Any, services: Any) -> None:
    eid = await start(bus, EXECUTION_LIMIT)
    fin = await finished(bus, eid)
    assert fin["status"] == "failed" and fin["error"]["kind"] == "execution_timeout"
