"""Tokens: a token reaching a step (admission, scheduling) and a step run ending (its arcs),
SEMANTICS §7 and §8."""

from __future__ import annotations

from typing import Any

from noetl.dsl.cache import template_engine
from noetl.dsl.errors import NoetlError, StepFailedError, StepRunLimitError, TemplateError
from noetl.dsl.model import Step
from noetl.dsl.policy import admit, apply_patch, evaluate_arcs
from noetl.engine import loops, outside
from noetl.engine.emitter import Emitter, event_view
from noetl.engine.limits import DEFAULT_MAX_STEP_RUNS, execution_limit, too_large
from noetl.engine.state import EventView, ExecutionState, RunState
from noetl.events.ids import derive_id


def context(state: ExecutionState, args: dict[str, Any], event: EventView | None) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "workload": state.workload,
        "ctx": state.ctx,
        "args": args,
        "execution_id": state.execution_id,
    }
    if event is not None:
        ctx["event"] = event
    return ctx


def arrive(
    state: ExecutionState, step_name: str, args: dict[str, Any], trigger: EventView | None, em: Emitter
) -> None:
    """A token reaches a step: admission, then scheduling (SEMANTICS §7)."""
    step = state.playbook.step(step_name)
    state.run_counter += 1
    run = RunState(
        run_id=derive_id(state.execution_id, "run", state.run_counter)[:20],
        step=step_name,
        seq=state.run_counter,
        args=args,
        trigger=trigger,  # kept while it runs: a rerun that forks here hands it on (engine.fork)
    )
    state.runs[run.run_id] = run
    state.pending += 1
    most = execution_limit(state, "max_step_runs", DEFAULT_MAX_STEP_RUNS)
    if state.run_counter > most:
        err = StepRunLimitError(
            f"step {step_name!r} would be step run {state.run_counter} of this execution; the limit is "
            f"{most} (executor.spec.policy.limits.max_step_runs): an arc cycle that never ends? Give it an "
            "exit condition, or raise the limit"
        )
        unhandled(state, err.to_dict())  # first: no arc may fire after this failure
        server_step_failed(state, run, err, em)
        return
    engine = template_engine(state.playbook)
    try:
        allowed = admit(step.admit, context(state, args, trigger), engine, f"{step.path}.spec.policy.admit")
    except NoetlError as e:
        server_step_failed(state, run, e, em)
        return
    if not allowed:
        run.status, run.trigger = "skipped", None
        state.pending -= 1
        em.event("step.skipped", "step", step_name, "skipped", {"args": args}, run)
        return
    if step.lifecycle is not None and step.lifecycle.await_signal:
        outside.wait(state, step, run, trigger, em)  # SEMANTICS §17: starts when its signal comes
        return
    start(state, step, run, trigger, em)


def start(
    state: ExecutionState, step: Step, run: RunState, trigger: EventView | None, em: Emitter
) -> None:
    """An admitted token (whose signal, if it awaits one, has come) is scheduled, unless the
    execution is paused: then it is held until it resumes (SEMANTICS §17)."""
    step_name = run.step
    if state.paused:
        outside.hold(state, run, trigger)
        return
    em.event("step.scheduled", "step", step_name, "in_progress", {"args": run.args}, run)
    if (step.loop is not None or step.tool) and (late := outside.arm_step(state, step, run, em)):
        server_step_failed(state, run, late, em)
    elif step.loop is not None:
        loops.start_loop(state, step, run, trigger, em)
    elif not step.tool:
        # a router that awaited a signal ends with the signal's data (an approval's answer)
        awaited = step.lifecycle is not None and step.lifecycle.await_signal
        payload = {"result": run.args.get("signal") if awaited else None}
        em.event("step.done", "step", step_name, "success", payload, run)
        on_terminal(state, run, "step.done", payload, em)
    elif (oversize := too_large(state, run)) is not None:
        server_step_failed(state, run, oversize, em)
    else:
        em.command(run)


def server_step_failed(state: ExecutionState, run: RunState, err: NoetlError, em: Emitter) -> None:
    payload = {"result": None, "error": err.to_dict()}
    em.event("step.failed", "step", run.step, "error", payload, run)
    on_terminal(state, run, "step.failed", payload, em)


def apply_patches(state: ExecutionState, payload: dict[str, Any]) -> None:
    for patch in payload.get("ctx_patches") or ():
        state.ctx = apply_patch(state.ctx, patch)


def on_terminal(
    state: ExecutionState, run: RunState, name: str, payload: dict[str, Any], em: Emitter
) -> None:
    """A step run ended: record it, fire its arcs (SEMANTICS §8) or note a leaf or a failure."""
    failed = name == "step.failed"
    run.status = "failed" if failed else "done"
    run.trigger = None  # only a run that still runs may be forked from with it
    outside.disarm(run, em)
    run.result = payload.get("result")
    run.error = payload.get("error")
    state.pending -= 1
    if state.failed:
        return  # after an unhandled failure, arcs no longer fire
    step = state.playbook.step(run.step)
    status = "error" if failed else "success"
    view = event_view(name, status, payload)
    try:
        fired = evaluate_arcs(step.next, context(state, run.args, view), template_engine(state.playbook))
    except TemplateError as e:
        unhandled(state, e.to_dict())
        return
    if step.next is not None:
        em.event(
            "next.evaluated",
            "next",
            run.step,
            "success",
            {
                "mode": step.next.mode,
                "fired": [{"step": f.step, "arc": f.index, "args": f.args} for f in fired],
            },
            run,
        )
    if not fired:
        if failed:
            unhandled(state, run.error or StepFailedError(f"step {run.step} failed").to_dict())
        else:
            state.result = run.result
        return
    for f in fired:
        arrive(state, f.step, f.args, view, em)


def unhandled(state: ExecutionState, error: dict[str, Any]) -> None:
    if not state.failed:
        state.failed, state.error = True, error
