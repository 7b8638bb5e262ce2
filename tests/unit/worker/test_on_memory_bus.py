"""The pure engine and a real ``Worker`` on the in-memory bus (issue 16): behaviour of the worker
(pipelines, policies, loops, exec: local, cancel) in milliseconds, without a nats-server. The
engine's decisions come from the same ``decide`` the server runs; only the transport is the twin.
The guarantees (kills, elections, redelivery over NATS) stay with tests/faults and tests/cluster."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from noetl.engine import is_input
from noetl.events import subjects as s
from noetl.events.batches import events_of
from noetl.events.envelope import Event, dumps, make_event
from noetl.events.memory import MemoryBus
from noetl.store.catalog import Catalog
from noetl.worker.service import Worker
from tests.unit.engine.helpers import Driver

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"


async def run(text: str, *, cancel_after: int | None = None) -> tuple[Driver, list[dict[str, Any]]]:
    """Engine and worker meet on a ``MemoryBus``: commands out, the worker's events back in."""
    bus = MemoryBus()
    await bus.prepare()
    d = Driver(text)
    await (await Catalog.open(bus)).put_digest(d.state.playbook.digest, text)
    inputs: asyncio.Queue[Event] = asyncio.Queue()
    worker_events: list[dict[str, Any]] = []

    async def on_event(m: Any) -> None:
        for ev in events_of(m.data):
            if ev.get("source") == "worker":
                worker_events.append(dict(ev))
                if is_input(ev):
                    await inputs.put(ev)

    await bus.subscribe("noetl.events.>", on_event)
    worker = Worker(bus, concurrency=8)
    await worker.start()
    try:
        while not d.state.finished:
            for cmd in d.take():
                await bus.publish(s.command_subject(cmd["pool"]), dumps(cmd), msg_id=cmd["command_id"])
            ev = await asyncio.wait_for(inputs.get(), 10)
            d.feed(ev)
            if cancel_after is not None and len(worker_events) >= cancel_after:
                cancel = make_event(
                    event_id="cancel",
                    execution_id=d.state.execution_id,
                    timestamp="t",
                    source="server",
                    name="execution.cancel.requested",
                    entity_type="workflow",
                    entity_id=d.state.execution_id,
                    status="in_progress",
                    payload={"reason": "test"},
                )
                d.feed(cancel)
                await bus.publish(s.event_subject(0, d.state.execution_id, cancel["name"]), dumps(cancel))
                cancel_after = None
    finally:
        await worker.stop(drain=False)
    return d, worker_events


PIPELINE = (
    HEAD
    + """
workflow:
  - step: start
    tool:
      - name: a
        kind: python
        code: |
          def main():
              return 20
        spec:
          policy:
            rules:
              - else: {then: {do: continue, set_ctx: {got: "{{ outcome.result }}"}}}
      - name: b
        kind: noop
        result: "{{ a + 1 }}"
"""
)


async def test_a_pipeline_runs_and_its_ctx_patch_reaches_the_engine() -> None:
    began = time.perf_counter()
    d, events = await run(PIPELINE)
    assert d.state.status == "success" and d.state.result == 21 and d.state.ctx == {"got": 20}
    assert [e["name"] for e in events] == [
        "step.started",
        "task.started",
        "task.done",
        "task.started",
        "task.done",
        "step.done",
    ]
    assert time.perf_counter() - began < 5


RETRY = (
    HEAD
    + """
workflow:
  - step: start
    tool:
      - name: flaky
        kind: python
        code: |
          def main(_attempt):
              if _attempt < 3:
                  raise ValueError("not yet")
              return _attempt
        args: {_attempt: "{{ _attempt }}"}
        spec:
          policy:
            rules:
              - when: "{{ outcome.status == 'error' }}"
                then: {do: retry, attempts: 5, delay: 0}
              - else: {then: {do: continue}}
"""
)


async def test_retry_runs_the_task_again_on_the_worker() -> None:
    d, events = await run(RETRY)
    assert d.state.status == "success" and d.state.result == 3, d.state.error
    assert [e["name"] for e in events].count("task.done") == 3


def loop(exec_: str) -> str:
    return (
        HEAD
        + f"""
workflow:
  - step: start
    loop:
      in: "{{{{ range(30) | list }}}}"
      iterator: x
      spec: {{mode: parallel, max_in_flight: 4, policy: {{exec: {exec_}}}}}
    tool: [{{name: t, kind: noop, result: "{{{{ iter.x * 3 }}}}"}}]
"""
    )


async def test_distributed_and_local_loops_give_the_same_result_and_events() -> None:
    dist, dist_events = await run(loop("distributed"))
    local, local_events = await run(loop("local"))
    assert dist.state.result == local.state.result == [x * 3 for x in range(30)]

    def names(events: list[dict[str, Any]]) -> list[str]:
        return sorted(e["name"] for e in events)

    assert names(dist_events) == names(local_events)


async def test_a_cancel_interrupts_the_running_loop() -> None:
    text = (
        HEAD
        + """
workflow:
  - step: start
    loop:
      in: "{{ range(50) | list }}"
      iterator: x
    tool:
      - name: slow
        kind: python
        code: |
          import time
          def main():
              time.sleep(0.02)
              return 1
"""
    )
    d, events = await run(text, cancel_after=6)
    ended = sum(e["name"] in ("loop.iteration.done", "loop.iteration.failed") for e in events)
    assert d.state.status == "cancelled" and ended < 50, f"{ended} iterations ended after the cancel"


def huge_ctx(looped: bool) -> str:
    loop = '    loop: {in: "{{ [1] }}", iterator: x}\n' if looped else ""
    return (
        HEAD
        + f"""
workflow:
  - step: start
{loop}    tool:
      - name: a
        kind: python
        code: |
          def main():
              return "x" * 1000000
        spec:
          policy:
            rules:
              - else: {{then: {{do: continue, set_ctx: {{big: "{{{{ outcome.result }}}}"}}}}}}
"""
    )


async def test_a_terminal_event_too_large_to_store_ends_the_run_as_failed() -> None:
    """Over MAX_TERMINAL_BYTES the worker sends the failed twin of its terminal event instead."""
    for looped, name in ((False, "step.failed"), (True, "loop.iteration.failed")):
        d, events = await run(huge_ctx(looped))
        ends = [e for e in events if e["name"].endswith((".done", ".failed")) and e["name"] != "task.done"]
        assert [e["name"] for e in ends] == [name]
        assert ends[0]["payload"]["error"]["kind"] == "payload_too_large"
        assert d.state.status == "failed"
