"""Time limits, signals and pause in the pure engine (SEMANTICS §16, §17): due times come in as
``timer.fired`` inputs, signals and pause/resume as input events; replay decides the same."""

from __future__ import annotations

from typing import Any

from noetl.engine import ExecutionState, decide, new_state, replay
from noetl.events.envelope import Command, Event, EventName, make_event
from noetl.events.ids import derive_id
from tests.unit.engine.helpers import answer, requested

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"
T0 = "2030-01-01T00:00:00+00:00"


class Clocked:
    """A driver whose events carry real timestamps, so the engine arms timers."""

    def __init__(self, body: str) -> None:
        ev = requested(HEAD + body)
        ev["timestamp"] = T0
        self.state: ExecutionState = new_state(ev)
        self.log: list[Event] = []
        self.commands: list[Command] = []
        self.timers: list[dict[str, Any]] = []
        self.cancelled: list[str] = []
        self.n = 0
        self.feed(ev)

    def feed(self, ev: Event) -> None:
        self.log.append(ev)
        d = decide(self.state, ev)
        self.log.extend(d.events)
        self.commands.extend(d.commands)
        self.timers.extend(d.timers)
        self.cancelled.extend(d.cancel_timers)

    def take(self) -> list[Command]:
        out, self.commands = self.commands, []
        return out

    def names(self) -> list[str]:
        return [e["name"] for e in self.log]

    def outside(self, name: EventName, payload: dict[str, Any], **kw: Any) -> None:
        self.n += 1
        self.feed(
            make_event(
                event_id=derive_id("outside", self.n),
                execution_id=self.state.execution_id,
                timestamp=T0,
                source="server",
                name=name,
                entity_type="workflow",
                entity_id=self.state.execution_id,
                status="in_progress",
                payload=payload,
                **kw,
            )
        )

    def fire(self, timer: dict[str, Any]) -> None:
        self.outside("timer.fired", dict(timer), step_run_id=timer.get("step_run_id"))


def _timer(d: Clocked, kind: str) -> dict[str, Any]:
    (t,) = [t for t in d.timers if t["kind"] == kind]
    return t


def test_step_timeout_fails_the_run_cancels_it_and_its_arc_routes_it() -> None:
    d = Clocked("""
workflow:
  - step: start
    spec: {policy: {lifecycle: {timeout_s: 5}}}
    tool: {kind: noop}
    next:
      arcs:
        - {step: late, when: "{{ event.error.kind == 'step_timeout' }}"}
  - step: late
    tool: {kind: noop}
""")
    (cmd,) = d.take()
    t = _timer(d, "step_timeout")
    assert t["at"] == "2030-01-01T00:00:05+00:00" and t["step_run_id"] == cmd["step_run_id"]
    d.fire(t)
    assert "step.cancelled" in d.names()
    failed = next(e for e in d.log if e["name"] == "step.failed")
    assert failed["payload"]["error"]["kind"] == "step_timeout"
    assert [c["step"] for c in d.take()] == ["late"]
    d.feed(answer(cmd))  # the worker's late answer is ignored
    assert d.state.runs[cmd["step_run_id"]].status == "failed"
    assert t["timer_id"] in d.cancelled or not d.state.runs[cmd["step_run_id"]].timers


def test_a_run_that_ends_in_time_disarms_its_timer_and_a_late_fire_is_ignored() -> None:
    d = Clocked("""
executor: {spec: {policy: {defaults: {timeouts: {step_s: 3}}}}}
workflow:
  - step: start
    tool: {kind: noop}
""")
    (cmd,) = d.take()
    t = _timer(d, "step_timeout")
    d.feed(answer(cmd))
    assert t["timer_id"] in d.cancelled and d.state.status == "success"


def test_execution_timeout_fails_the_execution_and_stops_running_runs() -> None:
    d = Clocked("""
executor: {spec: {policy: {defaults: {timeouts: {execution_s: 60}}}}}
workflow:
  - step: start
    tool: {kind: noop}
""")
    d.take()
    t = _timer(d, "execution_timeout")
    assert t["at"] == "2030-01-01T00:01:00+00:00"
    d.fire(t)
    assert d.state.finished and d.state.status == "failed"
    assert d.state.error["kind"] == "execution_timeout"
    assert "step.cancelled" in d.names()


def test_deadline_counts_from_workflow_started() -> None:
    d = Clocked("""
workflow:
  - step: start
    spec: {policy: {lifecycle: {deadline_s: 30}}}
    tool: {kind: noop}
""")
    d.take()
    assert _timer(d, "step_deadline")["at"] == "2030-01-01T00:00:30+00:00"


APPROVAL = """
workflow:
  - step: start
    next: {arcs: [{step: approve}]}
  - step: approve
    spec: {policy: {lifecycle: {await: {signal: approval, timeout_s: 600}}}}
    next:
      arcs:
        - {step: ship, when: "{{ event.name == 'step.done' and event.result.approved }}"}
        - {step: reject}
  - step: ship
    tool: {kind: noop}
  - step: reject
    tool: {kind: noop}
"""


def test_an_approval_waits_for_its_signal_and_routes_on_the_data() -> None:
    d = Clocked(APPROVAL)
    assert "step.waiting" in d.names() and not d.take()
    assert _timer(d, "signal_timeout")["at"] == "2030-01-01T00:10:00+00:00"
    d.outside("signal.received", {"signal": "approval", "data": {"approved": True}})
    assert [c["step"] for c in d.take()] == ["ship"]
    done = next(e for e in d.log if e["name"] == "step.done" and e["entity_id"] == "approve")
    assert done["payload"]["result"] == {"approved": True}
    assert _timer(d, "signal_timeout")["timer_id"] in d.cancelled


def test_a_signal_sent_before_the_token_waits_is_queued() -> None:
    d = Clocked(
        APPROVAL.replace(
            "next: {arcs: [{step: approve}]}", "tool: {kind: noop}\n    next: {arcs: [{step: approve}]}"
        )
    )
    (cmd,) = d.take()
    d.outside("signal.received", {"signal": "approval", "data": {"approved": False}})
    assert d.state.signals == {"approval": [{"approved": False}]}
    d.feed(answer(cmd))
    assert [c["step"] for c in d.take()] == ["reject"] and not d.state.signals


def test_each_signal_taken_is_recorded_with_the_running_total() -> None:
    """The server bounds the signals still queued by ``signal.received`` minus the last
    ``signal.taken``: one taken while a run waits and one queued before it waits both count."""
    d = Clocked(APPROVAL)
    d.outside("signal.received", {"signal": "approval", "data": {"approved": True}})
    d.outside("signal.received", {"signal": "other", "data": 1})
    taken = [e for e in d.log if e["name"] == "signal.taken"]
    assert [e["payload"] for e in taken] == [{"signal": "approval", "taken": 1}]
    assert taken[0]["entity_id"] == "approve" and d.state.signals == {"other": [1]}


def test_no_signal_in_time_is_signal_timeout() -> None:
    d = Clocked(
        APPROVAL.replace("- {step: reject}", "- {step: reject, when: \"{{ event.error.kind == 'x' }}\"}")
    )
    d.fire(_timer(d, "signal_timeout"))
    assert d.state.status == "failed" and d.state.error["kind"] == "signal_timeout"


def test_pause_holds_new_steps_and_resume_schedules_them() -> None:
    d = Clocked("""
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: b}]}
  - step: b
    tool: {kind: noop}
""")
    (cmd,) = d.take()
    d.outside("execution.pause.requested", {})
    assert "execution.paused" in d.names()
    d.feed(answer(cmd))  # the running run finishes
    assert not d.take() and not d.state.finished
    d.outside("execution.resume.requested", {})
    assert [c["step"] for c in d.take()] == ["b"]


def test_cancel_while_waiting_ends_the_execution() -> None:
    d = Clocked(APPROVAL)
    d.outside("execution.cancel.requested", {"reason": "no"})
    assert d.state.finished and d.state.status == "cancelled"


def test_replay_makes_the_same_decisions() -> None:
    d = Clocked(APPROVAL)
    d.outside("execution.pause.requested", {})
    d.outside("signal.received", {"signal": "approval", "data": {"approved": True}})
    d.outside("execution.resume.requested", {})
    for cmd in d.take():
        d.feed(answer(cmd))
    assert d.state.status == "success"
    _, decisions = replay(d.log)
    regenerated = [e["event_id"] for dec in decisions for e in dec.events]
    recorded = [e["event_id"] for e in d.log if e["source"] == "server" and e.get("cause_id")]
    assert regenerated == recorded
