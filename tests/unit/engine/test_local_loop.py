"""``exec: local`` in the pure engine (SEMANTICS §21): one command for the whole loop, every
iteration in flight until its event or the worker's ``loop.local.stopped``."""

from __future__ import annotations

from noetl.events.envelope import Command, Event, make_event
from tests.unit.engine.helpers import Driver, answer

LOCAL = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t, path: t}
workflow:
  - step: start
    spec: {policy: {failure: {mode: MODE}}}
    loop:
      in: "{{ range(5) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 2, policy: {exec: local}}
    tool: {kind: noop}
"""


def _iteration(cmd: Command, i: int, ok: bool = True) -> Event:
    one: Command = {**cmd, "command_id": f"{cmd['command_id']}-{i}", "index": i}
    return answer(one, ok=ok, result=i * 10)


def _stopped(cmd: Command, skipped: list[int]) -> Event:
    return make_event(
        event_id=f"{cmd['command_id']}-stopped",
        execution_id=cmd["execution_id"],
        timestamp="t2",
        source="worker",
        name="loop.local.stopped",
        entity_type="loop",
        entity_id=cmd["step"],
        status="in_progress",
        payload={"skipped": skipped},
        step_run_id=cmd["step_run_id"],
    )


def test_one_command_carries_the_loop_and_its_iterations_end_it() -> None:
    d = Driver(LOCAL.replace("MODE", "fail_fast"))
    (cmd,) = d.commands
    assert cmd["index"] is None and cmd["local"] == {
        "items": [0, 1, 2, 3, 4],
        "iterator": "i",
        "max_in_flight": 2,
        "fail_fast": True,
    }
    for i in (1, 0, 4, 2):
        d.feed(_iteration(cmd, i))
        assert not d.state.finished
    d.feed(_iteration(cmd, 3))
    assert d.state.status == "success" and d.state.result == [0, 10, 20, 30, 40]
    assert len(d.commands) == 1


def test_a_fail_fast_failure_ends_the_loop_when_the_worker_reports_what_it_never_started() -> None:
    d = Driver(LOCAL.replace("MODE", "fail_fast"))
    (cmd,) = d.commands
    d.feed(_iteration(cmd, 0))
    d.feed(_iteration(cmd, 1, ok=False))
    assert not d.state.finished, "iterations 2-4 still count as in flight"
    d.feed(_stopped(cmd, [2, 3, 4]))
    assert d.state.status == "failed" and d.state.error["kind"] == "python_error"
    ended = [e for e in d.log if e["name"] in ("step.failed", "loop.done")]
    assert [e["name"] for e in ended] == ["step.failed"] and ended[0]["payload"]["done"] == 1


def test_a_report_naming_ended_iterations_changes_nothing_for_them() -> None:
    d = Driver(LOCAL.replace("MODE", "best_effort"))
    (cmd,) = d.commands
    for i in range(3):
        d.feed(_iteration(cmd, i))
    d.feed(_stopped(cmd, [1, 2, 3, 4]))  # 1 and 2 ended already: only 3 and 4 were never started
    done = [e for e in d.log if e["name"] in ("loop.done", "step.failed")]
    assert len(done) == 1 and done[0]["name"] == "step.failed"
    assert done[0]["payload"]["error"]["kind"] == "aborted"
    assert done[0]["payload"]["done"] == 3
