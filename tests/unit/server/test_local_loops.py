"""``exec: local`` loops (SEMANTICS §21), server and worker on the in-memory bus: one command runs
the whole loop on one worker with the same events as a distributed loop (the kill-and-resume
proof, over a real nats-server, is in tests/faults/test_kill.py)."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest

from noetl.client.run import run_and_wait


def loop(mode: str, *, fail_at: int | None = None, failure: str = "fail_fast", n: int = 40) -> str:
    spec = (
        "{mode: parallel, max_in_flight: 8, policy: {exec: local}}"
        if mode == "parallel"
        else ("{policy: {exec: local}}")
    )
    code = (
        f"def main(i):\n              if i == {fail_at}:\n                  raise ValueError('bad item')\n"
        "              return i * 2"
    )
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: local_loop, path: tests/local_loop}}
workflow:
  - step: start
    spec: {{policy: {{failure: {{mode: {failure}}}}}}}
    loop:
      in: "{{{{ range({n}) | list }}}}"
      iterator: i
      spec: {spec}
    tool:
      - name: double
        kind: python
        args: {{i: "{{{{ iter.i }}}}"}}
        code: |
          {code}
"""


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
async def test_a_local_loop_is_one_command_with_the_events_of_a_distributed_one(
    bus: Any, services: Any, mode: str
) -> None:
    _, worker = services
    before = worker.completed
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": loop(mode)}, timeout=60)
    assert out["status"] == "success", out.get("error")
    assert out["result"] == [i * 2 for i in range(40)]
    names = Counter(e["name"] for e in out["events"])
    assert names["loop.iteration.done"] == 40 and names["task.done"] == 40 and names["loop.done"] == 1, names
    assert worker.completed - before == 1, f"{worker.completed - before} commands ran the loop"


async def test_a_fail_fast_local_loop_starts_nothing_after_the_failure(bus: Any, services: Any) -> None:
    out = await run_and_wait(
        bus, {"request_id": uuid.uuid4().hex, "playbook": loop("sequential", fail_at=3)}, timeout=60
    )
    assert out["status"] == "failed" and out["error"]["kind"] == "python_error", out.get("error")
    terminal = ("loop.iteration.done", "loop.iteration.failed")
    ended = [e["payload"]["index"] for e in out["events"] if e["name"] in terminal]
    stopped = [e for e in out["events"] if e["name"] == "loop.local.stopped"]
    assert ended == [0, 1, 2, 3], f"iterations that ran: {ended}"
    assert len(stopped) == 1 and stopped[0]["payload"]["skipped"] == list(range(4, 40))
    failed = out["steps"]["start"][0]
    assert failed["status"] == "failed" and failed["error"]["kind"] == "python_error"


async def test_a_best_effort_local_loop_runs_every_iteration(bus: Any, services: Any) -> None:
    out = await run_and_wait(
        bus,
        {"request_id": uuid.uuid4().hex, "playbook": loop("parallel", fail_at=5, failure="best_effort")},
        timeout=60,
    )
    assert out["status"] == "success", out.get("error")
    result = out["steps"]["start"][0]["result"]
    assert result[5] is None
    assert [r for i, r in enumerate(result) if i != 5] == [i * 2 for i in range(40) if i != 5]
    done = [e for e in out["events"] if e["name"] == "loop.done"]
    assert done[0]["payload"]["done"] == 39 and done[0]["payload"]["failed"] == 1


BIG_NOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big_local, path: tests/big_local}
workflow:
  - step: start
    loop:
      in: "{{ range(2000) | map('string') | map('center', 100) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 64, policy: {exec: local}}
    tool: [{name: t, kind: noop, result: "{{ iter.i }}"}]
"""


async def test_a_large_local_loop_sends_its_items_by_reference(bus: Any, services: Any) -> None:
    """2 000 items of 100 characters (~200 KB) are over what a command carries inline: they go
    through the results object store, and the loop still ends with every result in order."""
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": BIG_NOOP}, timeout=120)
    assert out["status"] == "success", out.get("error")
    from noetl.events.objects import resolve

    result = await resolve(bus, out["steps"]["start"][0]["result"])  # ~200 KB of results: a reference
    assert result == [str(i).center(100) for i in range(2000)]
