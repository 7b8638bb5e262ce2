"""Time and the outside world (SEMANTICS §16, §17): time limits, awaited signals, pause.

The engine reads no clock. A time limit becomes a timer the decision asks for (``Decision.timers``,
a due time computed from the causing event's timestamp); the adapter keeps it in JetStream, which
hands it back as a ``timer.fired`` input at the due time. Signals, pause and resume arrive as input
events too, so replaying the log makes the same decisions.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.errors import (
    AbortedError,
    DecisionUnstorableError,
    ExecutionTimeoutError,
    NoetlError,
    SignalTimeoutError,
    StepTimeoutError,
)
from noetl.dsl.model import Step
from noetl.engine import loops, routing
from noetl.engine.emitter import Emitter
from noetl.engine.state import EventView, ExecutionState, RunState
from noetl.events import vocabulary as vocab
from noetl.events.clock import later, not_after
from noetl.events.envelope import Event
from noetl.events.ids import derive_id


def _timeouts(state: ExecutionState) -> dict[str, Any]:
    """``executor.spec.policy.defaults.timeouts``: ``step_s`` and ``execution_s``."""
    policy = (state.playbook.executor.get("spec") or {}).get("policy") or {}
    return ((policy.get("defaults") or {}).get("timeouts")) or {}


def _due(ts: str | None, seconds: float) -> str | None:
    """``ts`` plus ``seconds``; None when ``ts`` is not a timestamp (a hand-made event in a test),
    in which case no timer is armed."""
    return later(ts, seconds)


def _passed(due: str, now: str) -> bool:
    return not_after(due, now)


def _arm(
    state: ExecutionState, em: Emitter, kind: str, at: str, run: RunState | None = None, **extra: object
) -> str:
    timer_id = derive_id(state.execution_id, run.run_id if run else "", kind)
    em.out.timers.append(
        {
            "timer_id": timer_id,
            "execution_id": state.execution_id,
            "partition": state.partition,
            "kind": kind,
            "at": at,
            "step_run_id": run.run_id if run else None,
            **extra,
        }
    )
    if run is not None:
        run.timers.append(timer_id)
    return timer_id


def on_started(state: ExecutionState, em: Emitter) -> None:
    """``workflow.started``: deadlines count from here; the execution's own time limit is armed."""
    state.started_at = em.ts
    limit = _timeouts(state).get("execution_s")
    if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
        at = _due(em.ts, limit)
        if at is not None:
            _arm(state, em, "execution_timeout", at, limit_s=limit)


def arm_step(state: ExecutionState, step: Step, run: RunState, em: Emitter) -> NoetlError | None:
    """A step run was scheduled: its ``timeout_s`` (or the executor's ``step_s``) and its
    ``deadline_s``. A deadline already past fails the run at once (the error is returned)."""
    lc = step.lifecycle
    timeout = lc.timeout_s if lc is not None and lc.timeout_s else _timeouts(state).get("step_s")
    if isinstance(timeout, int | float) and not isinstance(timeout, bool) and timeout > 0:
        at = _due(em.ts, timeout)
        if at is not None:
            _arm(state, em, "step_timeout", at, run, limit_s=timeout, counted_from="step.scheduled")
    if lc is not None and lc.deadline_s and state.started_at:
        at = _due(state.started_at, lc.deadline_s)
        if at is not None:
            if _passed(at, em.ts):
                return _step_timeout(step, run, lc.deadline_s, "deadline_s", "workflow.started")
            _arm(state, em, "step_deadline", at, run, limit_s=lc.deadline_s, counted_from="workflow.started")
    return None


def disarm(run: RunState, em: Emitter) -> None:
    """A run ended: its timers are of no use any more (one that fires anyway is ignored)."""
    if run.timers:
        em.out.cancel_timers.extend(run.timers)
        run.timers = []


def _step_timeout(step: Step, run: RunState, seconds: float, knob: str, since: str) -> StepTimeoutError:
    return StepTimeoutError(
        f"step {run.step!r} did not end within {knob}={seconds:g} seconds of {since} "
        f"({step.path}.spec.policy.lifecycle.{knob}, or executor.spec.policy.defaults.timeouts.step_s): "
        "raise the limit, or route step_timeout with an arc",
        limit_s=seconds,
    )


def stop_run(state: ExecutionState, run: RunState, err: NoetlError, em: Emitter) -> None:
    """End a running step run from the server: its commands still running are interrupted
    (``step.cancelled``, which workers follow); its own terminal event, if one comes, is ignored."""
    if run.loop is not None:
        em.out.ended_loops.append(run.run_id)
    em.event("step.cancelled", "step", run.step, "error", {"error": err.to_dict()}, run)
    routing.server_step_failed(state, run, err, em)


def on_abort(state: ExecutionState, event: Event, em: Emitter) -> None:
    """The server could not store a decision of this execution (``decision_unstorable``): every
    run still open ends now, so the execution finishes with the error, nothing new starts, and a
    rebuild from the log (which replays this input) knows it ended."""
    payload = event.get("payload") or {}
    raw = payload.get("error")
    err = DecisionUnstorableError(
        str(raw.get("message") if isinstance(raw, dict) else raw or "a decision could not be stored")
    )
    routing.unhandled(state, err.to_dict())
    for run in sorted(state.runs.values(), key=lambda r: r.seq):
        if run.status in ("running", "waiting"):
            run.status = "running"
            stop_run(state, run, err, em)


def on_timer(state: ExecutionState, event: Event, em: Emitter) -> None:
    p = event.get("payload") or {}
    kind = p.get("kind")
    if kind == "execution_timeout":
        limit = p.get("limit_s")
        err = ExecutionTimeoutError(
            f"the execution did not finish within execution_s={limit} seconds of workflow.started "
            "(executor.spec.policy.defaults.timeouts.execution_s): raise the limit, or split the work"
        )
        routing.unhandled(state, err.to_dict())
        for running in sorted(state.runs.values(), key=lambda r: r.seq):
            if running.status == "running":
                stop_run(state, running, err, em)
        return
    run = state.runs.get(event.get("step_run_id") or p.get("step_run_id") or "")
    if run is None or p.get("timer_id") not in run.timers:
        return  # a timer of a run that ended (it was disarmed after it fired), or unknown
    step = state.playbook.step(run.step)
    if kind in ("step_timeout", "step_deadline") and run.status == "running":
        knob, since = (
            ("timeout_s", "step.scheduled")
            if kind == "step_timeout"
            else (
                "deadline_s",
                "workflow.started",
            )
        )
        stop_run(state, run, _step_timeout(step, run, p.get("limit_s") or 0, knob, since), em)
    elif kind == "signal_timeout" and run.status == "waiting":
        signal = step.lifecycle.await_signal if step.lifecycle else None
        timed_out = SignalTimeoutError(
            f"step {run.step!r} waited {p.get('limit_s')} seconds for signal {signal!r} and none came "
            f"({step.path}.spec.policy.lifecycle.await.timeout_s): send it in time with "
            f"`noetl signal {state.execution_id} {signal}`, or route signal_timeout with an arc",
            signal=signal,
        )
        run.status = "running"  # so the failure is recorded like any other end of the run
        routing.server_step_failed(state, run, timed_out, em)


def wait(
    state: ExecutionState, step: Step, run: RunState, trigger: EventView | None, em: Emitter
) -> None:
    """An admitted token waits at a step with ``lifecycle.await`` for its signal; a signal that
    arrived before it is waiting in the queue and is taken at once."""
    lc = step.lifecycle
    assert lc is not None and lc.await_signal
    run.status, run.trigger = "waiting", trigger
    em.event(
        "step.waiting",
        "step",
        step.name,
        "in_progress",
        {"args": run.args, "signal": lc.await_signal, "timeout_s": lc.await_timeout_s},
        run,
    )
    queued = state.signals.get(lc.await_signal)
    if queued:
        _take(state, step, run, queued.pop(0), em)
        if not queued:
            del state.signals[lc.await_signal]
        return
    if lc.await_timeout_s:
        at = _due(em.ts, lc.await_timeout_s)
        if at is not None:
            _arm(state, em, "signal_timeout", at, run, limit_s=lc.await_timeout_s)


def _take(state: ExecutionState, step: Step, run: RunState, data: object, em: Emitter) -> None:
    """The run goes on with the signal's data; ``signal.taken`` says the queue shrank, so the
    request handler bounds only the signals still queued (received minus ``taken``) and a
    long-lived execution that keeps consuming signals is never refused for its history. Emitted
    after the run's own events, so their ids stay what they were before this event existed."""
    disarm(run, em)
    run.status = "running"
    run.args = {**run.args, "signal": data}
    routing.start(state, step, run, run.trigger, em)
    state.signals_taken += 1
    signal = step.lifecycle.await_signal if step.lifecycle is not None else None
    em.event(vocab.SIGNAL_TAKEN, "step", step.name, "in_progress",
             {"signal": signal, "taken": state.signals_taken}, run)


def on_signal(state: ExecutionState, event: Event, em: Emitter) -> None:
    """A signal is taken by the first run waiting for it (arrival order), else queued by name."""
    p = event.get("payload") or {}
    name, data = p.get("signal"), p.get("data")
    if not isinstance(name, str) or state.failed:
        return
    for run in sorted(state.runs.values(), key=lambda r: r.seq):
        if run.status != "waiting":
            continue
        step = state.playbook.step(run.step)
        if step.lifecycle is not None and step.lifecycle.await_signal == name:
            _take(state, step, run, data, em)
            return
    state.signals.setdefault(name, []).append(data)


def hold(state: ExecutionState, run: RunState, trigger: EventView | None) -> None:
    """A token admitted while the execution is paused waits to be scheduled until it resumes."""
    run.status, run.trigger = "held", trigger
    state.held.append(run.run_id)


def on_pause(state: ExecutionState, event: Event, em: Emitter) -> None:
    if state.paused:
        return
    state.paused = True
    reason = (event.get("payload") or {}).get("reason")
    em.event("execution.paused", "workflow", state.execution_id, "in_progress", {"reason": reason})


def on_resume(state: ExecutionState, event: Event, em: Emitter) -> None:
    if not state.paused:
        return
    state.paused = False
    em.event("execution.resumed", "workflow", state.execution_id, "in_progress", {})
    held, state.held = state.held, []
    for run_id in held:
        run = state.runs[run_id]
        if run.status == "held" and not state.failed:
            run.status = "running"
            routing.start(state, state.playbook.step(run.step), run, run.trigger, em)
    for run in sorted(state.runs.values(), key=lambda r: r.seq):
        if run.loop is not None and run.status == "running":
            loops.resume_loop(state, run, em)


def stop_idle(state: ExecutionState, em: Emitter) -> None:
    """After an unhandled failure (or a cancel) nothing new starts: runs waiting for a signal or
    held by a pause end now, or the execution would never end."""
    if not state.failed:
        return
    for run in sorted(state.runs.values(), key=lambda r: r.seq):
        if run.status in ("waiting", "held"):
            what = "waiting for a signal" if run.status == "waiting" else "held by a pause"
            disarm(run, em)
            run.status = "running"
            err = AbortedError(
                f"step {run.step!r} was {what} when the execution "
                + ("was cancelled" if state.cancelled else "failed")
            )
            routing.server_step_failed(state, run, err, em)
    state.held = []
