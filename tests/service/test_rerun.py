"""Rerun (issue 31): a new execution forked from a failed one's log continues from the step that
failed, with a fixed payload, without running the steps that succeeded again; the lineage is in
``execution.forked``; and what cannot be forked is refused with what to do."""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from noetl.cli.rerun_cmd import _rerun
from noetl.client.run import run_and_wait, wait_finished
from noetl.client.view import execution_output
from noetl.events.bus import read_execution_events
from noetl.events.nats_port import NatsBus
from noetl.server.lineage import reruns_of
from noetl.server.rerun import prepare_rerun
from noetl.store.catalog import Catalog

FLAKY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: tests/flaky}
workload: {divisor: 0}
workflow:
  - step: start
    next: {arcs: [{step: fetch}]}
  - step: fetch
    tool:
      - name: count
        kind: python
        code: |
          def main():
              return 10
        spec:
          policy:
            rules:
              - else:
                  then: {do: continue, set_ctx: {fetched: "{{ outcome.result }}"}}
    next: {arcs: [{step: divide, args: {n: "{{ event.result }}"}}]}
  - step: divide
    tool:
      - name: div
        kind: python
        args: {n: "{{ args.n }}", d: "{{ workload.divisor }}", f: "{{ ctx.fetched }}"}
        code: |
          def main(n, d, f):
              return n // d + f
    next: {arcs: [{step: report, when: "{{ event.status == 'success' }}"}]}
  - step: report
    tool: {kind: noop, result: "{{ ctx.fetched }}"}
"""


def _names(events: Sequence[Mapping[str, Any]], name: str) -> list[str]:
    return [e["entity_id"] for e in events if e["name"] == name and e.get("source") == "worker"]


@pytest.fixture
async def failed(nc: Any, services: Any) -> str:
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": FLAKY}, timeout=30)
    assert out["status"] == "failed", out
    assert out["error"]["kind"] == "python_error"
    return str(out["execution_id"])


async def _finish(nc: Any, execution_id: str) -> dict[str, Any]:
    await wait_finished(NatsBus(nc), execution_id, timeout=30)
    await asyncio.sleep(0.2)
    return execution_output(execution_id, await read_execution_events(NatsBus(nc), execution_id))


async def test_rerun_from_the_failed_step_keeps_what_succeeded(nc: Any, failed: str) -> None:
    bus = NatsBus(nc)
    catalog = await Catalog.open(bus)
    got = await prepare_rerun(bus, catalog, failed, payload={"divisor": 2})
    assert not isinstance(got, dict), got
    plan = got.to_dict()
    assert plan["from_steps"] == ["divide"]
    assert [k["step"] for k in plan["kept"]] == ["start", "fetch"]
    from noetl.client.run import submit

    new_id = await submit(bus, got.request)
    out = await _finish(nc, new_id)
    assert out["status"] == "success", out
    assert out["result"] == 10  # report's result: ctx.fetched, kept from the original
    events = await read_execution_events(NatsBus(nc), new_id)
    assert "fetch" not in _names(events, "step.started")  # the succeeded step did not run again
    forked = next(e for e in events if e["name"] == "execution.forked")
    assert forked["payload"]["from_execution_id"] == failed
    assert forked["payload"]["from_steps"] == ["divide"]
    assert (await reruns_of(bus, failed))[-1]["execution_id"] == new_id
    # the divide step saw the original's args (fetch's result) and ctx
    done = next(e for e in events if e["name"] == "step.done" and e["entity_id"] == "divide")
    assert done["payload"]["result"] == 10 // 2 + 10
    # a rerun's decisions replay like any execution's: the fork is in its request event
    from noetl.cli.replay_diff import replay_diff

    assert replay_diff(events).divergences == []


async def test_rerun_from_a_named_step_with_a_new_playbook(nc: Any, failed: str, capsys: Any) -> None:
    fixed = FLAKY.replace("n // d + f", "n + f")
    bus = NatsBus(nc)
    got = await prepare_rerun(bus, await Catalog.open(bus), failed, from_step="fetch", playbook=fixed)
    assert not isinstance(got, dict), got
    assert got.plan.steps == ["fetch"] and [k["step"] for k in got.plan.kept] == ["start"]
    # a version that routes differently before the fork point: said first, as noetl replay would
    other = FLAKY.replace('args: {n: "{{ event.result }}"}', 'args: {n: "{{ event.result * 3 }}"}')
    got = await prepare_rerun(bus, await Catalog.open(bus), failed, playbook=other)
    assert not isinstance(got, dict), got
    [note] = got.plan.not_kept
    assert "decides differently from the recording at input #2" in note and "noetl replay" in note


async def test_rerun_refusals_say_what_to_do(nc: Any, failed: str) -> None:
    bus = NatsBus(nc)
    catalog = await Catalog.open(bus)
    nowhere = await prepare_rerun(bus, catalog, failed, from_step="nope")
    assert nowhere["error"]["kind"] == "rerun_refused"
    assert "steps that ran: start, fetch, divide" in nowhere["error"]["message"]
    missing = await prepare_rerun(bus, catalog, failed, playbook=FLAKY.replace("step: divide", "step: split"))
    assert missing["error"]["kind"] == "rerun_refused"
    assert "no step 'divide'" in missing["error"]["message"]
    unknown = await prepare_rerun(bus, catalog, uuid.uuid4().hex)
    assert unknown["error"]["kind"] == "not_found"


async def test_rerun_command_dry_run_says_what_is_kept(
    nc: Any, failed: str, nats_server: Any, capsys: Any
) -> None:
    ns = argparse.Namespace(
        execution_id=failed,
        from_step=None,
        payload='{"divisor": 5}',
        playbook=None,
        version=None,
        request_id=None,
        dry_run=True,
        json=False,
    )
    assert await _rerun(nc, ns) == 0
    err = capsys.readouterr().err
    assert f"rerun of {failed} from divide" in err
    assert "kept (2 step runs, not run again): start, fetch" in err
    assert "dry run: nothing started" in err


async def test_short_ids_as_the_console_shows_them_resolve(nc: Any, failed: str) -> None:
    """`noetl status 9f3a1b2c3d4e…` (issue 31): the start of an id, with the console's ellipsis,
    is the execution it starts; an id nothing starts with is left for the command to refuse."""
    from noetl.server.api.queries import resolve_execution_id

    js = nc.jetstream()
    assert await resolve_execution_id(NatsBus.of(js), failed[:12] + "…") == failed
    assert await resolve_execution_id(NatsBus.of(js), failed) == failed
    assert await resolve_execution_id(NatsBus.of(js), "ffffffffffff") == "ffffffffffff"
    ambiguous = await resolve_execution_id(NatsBus.of(js), "0123")  # fewer than 4 characters after the strip
    assert ambiguous == "0123" or "give more of the id" in ambiguous["error"]["message"]


FAN = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fan, path: tests/fan}
workload: {items: [1, 2, 3]}
workflow:
  - step: start
    next:
      spec: {mode: inclusive}
      arcs: [{step: slow}, {step: each}]
  - step: slow
    tool:
      - name: nap
        kind: python
        code: |
          import time
          def main():
              time.sleep(0.3)
              return "slept"
  - step: each
    loop: {in: "{{ workload.items }}", iterator: x}
    tool:
      - name: check
        kind: python
        args: {x: "{{ iter.x }}"}
        code: |
          def main(x):
              if x == 3:
                  raise ValueError("three")
              return x
    next: {arcs: [{step: after, when: "{{ event.name == 'loop.done' }}"}]}
  - step: after
    tool: {kind: noop, result: ok}
"""


async def test_what_a_rerun_cannot_keep_is_said_first(nc: Any, services: Any) -> None:
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": FAN}, timeout=30)
    assert out["status"] == "failed", out
    bus = NatsBus(nc)
    got = await prepare_rerun(bus, await Catalog.open(bus), out["execution_id"])
    assert not isinstance(got, dict), got
    notes = " ".join(got.plan.not_kept)
    assert got.plan.steps == ["each"]
    assert (
        "loop step `each` runs again from its first iteration: 2 of its 3 iterations had succeeded" in notes
    )
    assert "`slow`" in notes and "was still running" in notes and "rerun --from slow" in notes
