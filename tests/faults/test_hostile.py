"""Hostile input never crashes a service and never loses other executions' work.

In-process server and worker on a nats-server of the test's own. Each test sends something bad,
then proves the system still runs a good execution."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.bus import connect
from noetl.events.envelope import dumps, make_event
from noetl.events.nats_port import NatsBus
from noetl.events.streams import ensure_all
from noetl.host.natsserver import NatsServer
from noetl.server.service import Server
from noetl.worker.service import Worker

GOOD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: good, path: hostile/good}
workflow:
  - step: start
    tool: {kind: noop, result: fine}
"""


@pytest.fixture
async def system(fresh_nats: NatsServer) -> AsyncIterator[Any]:
    nc = await connect(fresh_nats.url, name="hostile")
    await ensure_all(nc.jetstream())
    bus = NatsBus(nc)
    server, worker = Server(bus), Worker(bus, concurrency=64)
    await server.start()
    await worker.start()
    try:
        yield nc
    finally:
        await worker.stop(drain=False)
        await server.stop()
        await nc.close()


async def run(nc: Any, playbook: str = GOOD, **extra: Any) -> dict[str, Any]:
    return await run_and_wait(
        NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": playbook, **extra}, timeout=60
    )


async def still_works(nc: Any) -> None:
    out = await run(nc)
    assert out["status"] == "success" and out["result"] == "fine"


async def test_malformed_and_unknown_requests_are_rejected_and_logged(system: Any, caplog: Any) -> None:
    js = system.jetstream()
    await js.publish(s.REQUEST_SUBJECT, b"{not json", headers={"Nats-Msg-Id": "bad-1"})
    await js.publish(s.REQUEST_SUBJECT, b"[1, 2]", headers={"Nats-Msg-Id": "bad-2"})
    out = await run_and_wait(
        NatsBus(system), {"request_id": uuid.uuid4().hex, "playbook": GOOD, "bogus": 1}, timeout=30
    )
    assert out["status"] == "failed" and out["error"]["kind"] == "request_invalid"
    assert "bogus" in out["error"]["message"]
    await still_works(system)
    assert any("request rejected" in r.getMessage() for r in caplog.records)


async def test_invalid_playbook_is_rejected_with_its_problems(system: Any) -> None:
    out = await run(system, GOOD.replace("kind: noop", "kind: warp"))
    assert out["status"] == "failed" and out["error"]["kind"] == "playbook_invalid"
    assert "warp" in json.dumps(out["error"]["problems"])
    await still_works(system)


async def test_oversized_request_is_rejected(system: Any) -> None:
    out = await run(system, payload={"blob": "x" * 600_000})
    assert out["status"] == "failed" and "limit" in out["error"]["message"]
    assert "noetl catalog register" in out["error"]["message"]  # and says what to do
    await still_works(system)


async def test_forged_and_malformed_events_are_ignored(system: Any) -> None:
    js = system.jetstream()
    ghost = make_event(
        event_id="forged-1",
        execution_id="0" * 32,
        timestamp="t",
        source="worker",
        name="step.done",
        entity_type="step",
        entity_id="start",
        status="success",
        payload={"result": "pwned"},
        step_run_id="nope",
    )
    await js.publish(s.event_subject(0, "0" * 32, "step.done"), dumps(ghost))
    await js.publish(s.event_subject(0, "1" * 32, "step.failed"), b"\x00garbage")
    await js.publish(s.event_subject(0, "2" * 32, "loop.iteration.done"), b'{"name": "loop.iteration.done"}')
    await still_works(system)


BOMBS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bombs, path: hostile/bombs}
workflow:
  - step: start
    next:
      spec: {mode: inclusive}
      arcs: [{step: big_string}, {step: big_list}, {step: hang}]
  - step: big_string
    tool: {kind: noop, result: "{{ 'x' * 1000000000 }}"}
    next: {arcs: [{step: caught, when: "{{ event.error.kind == 'template_error' }}"}]}
  - step: big_list
    tool: {kind: noop, result: "{{ range(1000000000) | list }}"}
    next: {arcs: [{step: caught, when: "{{ event.error.kind == 'template_error' }}"}]}
  - step: hang
    tool:
      - name: forever
        kind: python
        spec: {timeout: 0.5}
        code: |
          def main():
              while True:
                  pass
    next: {arcs: [{step: caught, when: "{{ event.error.kind == 'timeout' }}"}]}
  - step: caught
    tool: {kind: noop}
"""


async def test_template_bombs_and_a_python_task_that_never_returns(system: Any) -> None:
    out = await run(system, BOMBS)
    assert out["status"] == "success", out["error"]
    assert [r["status"] for r in out["steps"]["caught"]] == ["done", "done", "done"]
    assert {r["error"]["kind"] for k in ("big_string", "big_list", "hang") for r in out["steps"][k]} == {
        "template_error",
        "timeout",
    }
    await still_works(system)


async def test_a_thousand_executions_requested_at_once_all_finish(system: Any) -> None:
    js = system.jetstream()
    ids = []
    finished: set[str] = set()
    all_done = asyncio.Event()

    async def on_finished(msg: Any) -> None:
        finished.add(json.loads(msg.data)["execution_id"])
        if len(finished) >= 1000:
            all_done.set()

    sub = await system.subscribe("noetl.events.*.*.workflow.finished", cb=on_finished)
    try:
        for _ in range(1000):
            rid = uuid.uuid4().hex
            ids.append(rid)
            await js.publish_async(
                s.REQUEST_SUBJECT, dumps({"request_id": rid, "playbook": GOOD}), headers={"Nats-Msg-Id": rid}
            )
        await js.publish_async_completed()
        await asyncio.wait_for(all_done.wait(), 240)
    finally:
        await sub.unsubscribe()
    assert len(finished) == 1000


async def test_newer_and_malformed_commands_and_events_are_refused_not_misread(system: Any) -> None:
    """Issue 16: a message is decoded once at the edge and its schema_version read. A command of
    a newer version is left for a newer worker (nak), a malformed one is dropped for good (term);
    the deployment goes on (the server's side is in tests/unit/test_wire_decode.py)."""
    js = system.jetstream()
    newer = make_event(
        event_id="newer-1",
        execution_id="3" * 32,
        timestamp="t",
        source="worker",
        name="step.done",
        entity_type="step",
        entity_id="start",
        status="success",
        step_run_id="r",
    )
    newer["schema_version"] = 99
    await js.publish(s.event_subject(0, "3" * 32, "step.done"), dumps(newer))
    await js.publish(s.command_subject(s.DEFAULT_POOL), b'{"command_id": 7}')
    future: dict[str, object] = {"command_id": "c", "execution_id": "4" * 32, "step": "x", "step_run_id": "r"}
    future["schema_version"] = 99
    await js.publish(s.command_subject(s.DEFAULT_POOL), dumps(future))
    await still_works(system)
    import asyncio

    left = -1
    for _ in range(60):  # the malformed command is dropped, the newer one waits for a newer worker
        left = (await js.stream_info(s.COMMANDS_STREAM)).state.messages
        if left == 1:
            break
        await asyncio.sleep(0.05)
    await js.purge_stream(s.COMMANDS_STREAM)
    assert left == 1, f"{left} commands left in {s.COMMANDS_STREAM}; expected only the newer one"
