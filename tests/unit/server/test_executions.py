"""Executions end to end, server and worker on the in-memory bus: requests, pipelines, workbook
templates, loop snapshots and a failing observer, as behaviour (the same on NATS, which
tests/service and the conformance suite run)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.batches import BATCHED, events_of
from noetl.events.bus import read_execution_events
from tests.service.test_execution import CHAIN


async def test_an_execution_runs_end_to_end(bus, services) -> None:
    out = await run_and_wait(
        bus, {"request_id": uuid.uuid4().hex, "playbook": CHAIN, "payload": {"n": 21}}, timeout=30
    )
    assert out["status"] == "success"
    assert out["result"] == 42 and out["ctx"] == {"doubled": 42}
    names = [e["name"] for e in out["events"]]
    assert names[0] == "playbook.execution.requested" and names[-1] == "playbook.processed"
    assert {"step.started", "task.started", "task.done", "step.done", "next.evaluated"} <= set(names)
    # the same events are in the stream, under the documented subjects: a worker's run stores
    # its events in one batch (docs/nats-contract.md "Batched events")
    stored = await bus.read(s.EVENTS_STREAM, [s.execution_events_filter(out["execution_id"])])
    unpacked = [(s.parse_event_subject(m.subject)[1:], e["name"]) for m in stored for e in events_of(m.data)]
    eid = out["execution_id"]
    assert [n for _, n in unpacked] == names
    assert all(at in ((eid, n), (eid, BATCHED)) for at, n in unpacked), unpacked
    assert len(stored) < len(names) and any(m.subject.endswith(BATCHED) for m in stored), unpacked


async def test_same_request_id_runs_once(bus, services) -> None:
    rid = uuid.uuid4().hex
    first = await run_and_wait(bus, {"request_id": rid, "playbook": CHAIN}, timeout=30)
    second = await run_and_wait(bus, {"request_id": rid, "playbook": CHAIN}, timeout=30)
    assert first["execution_id"] == second["execution_id"]
    events = await read_execution_events(bus, first["execution_id"])
    assert [e["name"] for e in events].count("workflow.started") == 1


async def test_invalid_inline_playbook_is_rejected_with_problems(bus, services) -> None:
    bad = CHAIN.replace("kind: python", "kind: teleport")
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": bad}, timeout=30)
    assert out["status"] == "failed" and out["error"]["kind"] == "playbook_invalid"
    assert "teleport" in json.dumps(out["error"])


WORKBOOK_SPEC = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: wb, path: tests/wb}
workbook:
  tasks:
    slow:
      kind: python
      spec:
        timeout: 0.3
        policy:
          rules:
            - when: "{{ outcome.status == 'error' }}"
              then: {do: fail}
      code: |
        import time
        def main():
            time.sleep(2)
            return 1
workflow:
  - step: start
    tool:
      - name: use
        kind: workbook
        task: slow
        spec:
          policy:
            rules:
              - when: "{{ outcome.status == 'error' and outcome.error.kind == 'timeout' }}"
                then: {do: continue, set_ctx: {timed_out: true}}
"""


async def test_workbook_template_spec_applies_and_is_not_rendered(bus, services) -> None:
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": WORKBOOK_SPEC}, timeout=30)
    assert out["status"] == "success" and out["ctx"] == {"timed_out": True}


WORKBOOK_POLICY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: wb-policy, path: tests/wb-policy}
workbook:
  tasks:
    flaky:
      kind: python
      args: {attempt: "{{ _attempt }}"}
      code: |
        def main(attempt):
            if attempt < 3:
                raise RuntimeError("not yet")
            return attempt
      spec:
        policy:
          rules:
            - when: "{{ outcome.status == 'error' }}"
              then: {do: retry, attempts: 3, delay: 0}
            - else: {then: {do: continue, set_ctx: {took: "{{ outcome.result }}"}}}
workflow:
  - step: start
    tool:
      - {name: use, kind: workbook, task: flaky}
"""


async def test_workbook_template_policy_decides_when_the_task_has_none(bus, services) -> None:
    """Without its template's rules the first error would fail the step (no policy: fail)."""
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": WORKBOOK_POLICY}, timeout=30)
    assert out["status"] == "success" and out["ctx"] == {"took": 3}


SNAPSHOTTING_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: snapshots, path: tests/snapshots}
workflow:
  - step: start
    next: {arcs: [{step: work}]}
  - step: work
    loop: {in: "{{ range(6) | list }}", iterator: item, spec: {mode: parallel, max_in_flight: 6}}
    tool:
      - {name: a, kind: noop, result: "{{ iter.item }}"}
      - name: b
        kind: python
        code: |
          import time
          def main():
              time.sleep(0.6)
              return 1
"""


async def _snapshot_count(bus: Any, execution_id: str) -> int:
    return len(await (await bus.kv(s.ITER_BUCKET)).keys(f"{execution_id}."))


async def test_a_finished_loop_leaves_no_iteration_snapshots(bus, services) -> None:
    """Each iteration writes a snapshot after task a; the server purges them all when the loop ends."""
    import asyncio

    from noetl.events.ids import execution_id_for

    rid = uuid.uuid4().hex
    eid = execution_id_for(rid)
    request = {"request_id": rid, "playbook": SNAPSHOTTING_LOOP}
    run = asyncio.create_task(run_and_wait(bus, request, timeout=30))
    seen = 0
    for _ in range(50):  # while task b sleeps, every iteration's snapshot is in the bucket
        seen = max(seen, await _snapshot_count(bus, eid))
        if seen == 6 or run.done():
            break
        await asyncio.sleep(0.05)
    out = await run
    assert out["status"] == "success" and out["result"] == [1] * 6
    assert seen == 6
    for _ in range(50):
        if await _snapshot_count(bus, eid) == 0:
            break
        await asyncio.sleep(0.05)
    assert await _snapshot_count(bus, eid) == 0


async def test_a_failing_metrics_observer_does_not_stop_decisions(bus, services) -> None:
    server, _ = services

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("metrics bug")

    server.observer = broken
    request = {"request_id": uuid.uuid4().hex, "playbook": CHAIN, "payload": {"n": 2}}
    out = await run_and_wait(bus, request, timeout=30)
    assert out["status"] == "success" and out["result"] == 4


HUGE_ERROR = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: huge_error, path: tests/huge_error}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        def main():
            raise ValueError("x" * 300000)
"""

PARENT_OF_HUGE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/parent_of_huge}
workflow:
  - step: start
    tool: {kind: playbook, path: HUGE}
"""


async def test_an_execution_ending_with_a_huge_error_shows_how_it_ended(bus: Any, services: Any) -> None:
    """A workflow.finished over the event limit leaves by reference. Before: its payload was only
    ``{payload_ref}``, so the API, CLI and metrics showed the execution as running and a parent
    saw ``failed: None: None``. Now a summary stays inline and readers read the rest back."""
    from noetl.server.api.queries import list_executions

    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": HUGE_ERROR}, timeout=30)
    assert out["status"] == "failed" and out["error"]["kind"] == "python_error", str(out)[:300]
    assert "x" * 300000 in out["error"]["message"], "the whole error is read back"
    events = await read_execution_events(bus, out["execution_id"])
    finished = next(e for e in events if e["name"] == "workflow.finished")
    assert finished["payload"]["status"] == "failed"
    only_finished = [s.execution_event_filter(out["execution_id"], "workflow.finished")]
    raw = await bus.read(s.EVENTS_STREAM, only_finished)
    inline = json.loads(raw[0].data)["payload"]
    assert inline["status"] == "failed" and inline["error"]["kind"] == "python_error", str(inline)[:300]
    assert "payload_ref" in inline and len(raw[0].data) < 16_384
    listed = {e["execution_id"]: e for e in (await list_executions(bus))["executions"]}
    assert listed[out["execution_id"]]["status"] == "failed", listed[out["execution_id"]]
    child_text = HUGE_ERROR.replace("path: tests/huge_error", "path: tests/huge_child")
    parent = PARENT_OF_HUGE.replace("path: HUGE", "path: tests/huge_child")
    from noetl.store.catalog import Catalog

    await (await Catalog.open(bus)).register(child_text)
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": parent}, timeout=30)
    assert out["status"] == "failed", str(out)[:300]
    assert "python_error" in json.dumps(out["error"])[:5000] and "None: None" not in out["error"]["message"]
