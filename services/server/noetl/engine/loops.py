"""Loop steps: iterations dispatched within ``max_in_flight``, their ends counted, and the
loop's one terminal event (SEMANTICS §7)."""

from __future__ import annotations

from typing import Any

from noetl.dsl.cache import template_engine
from noetl.dsl.errors import (
    AbortedError,
    IterationFailedError,
    LoopInNotListError,
    LoopSizeLimitError,
    NoetlError,
    ReducerTypeError,
)
from noetl.dsl.model import Loop, Step
from noetl.dsl.reducers import apply_reduced
from noetl.engine import routing
from noetl.engine.emitter import Emitter
from noetl.engine.limits import DEFAULT_MAX_LOOP_ITEMS, by_reference, execution_limit, too_large
from noetl.engine.state import EventView, ExecutionState, LoopState, RunState
from noetl.events.envelope import Event
from noetl.events.refs import is_reference

# the items of an exec: local loop travel in its command up to this size, by reference beyond
LOCAL_ITEMS_INLINE = 64 * 1024


def start_loop(
    state: ExecutionState, step: Step, run: RunState, trigger: EventView | None, em: Emitter
) -> None:
    assert step.loop is not None
    try:
        items = template_engine(state.playbook).render(
            step.loop.in_, routing.context(state, run.args, trigger), f"{step.loop.path}.in"
        )
    except NoetlError as e:
        routing.server_step_failed(state, run, e, em)
        return
    if is_reference(items):
        # a large result travels by reference (SEMANTICS §11); reading it is I/O, so the engine
        # asks for it with an input of its own and starts the loop when that comes back with the
        # value the adapter read: a rebuild reads the same immutable object again
        run.items_ref = items
        em.event("loop.items.read", "loop", step.name, "in_progress", {"ref": items}, run)
        return
    _begin(state, step, run, items, em)


def on_items_read(state: ExecutionState, run: RunState, event: Event, em: Emitter) -> None:
    """``loop.items.read`` came back: the adapter attached the referenced value (``items``), or
    why it could not read it (``read_error``)."""
    step = state.playbook.step(run.step)
    assert step.loop is not None and run.items_ref is not None
    p = event.get("payload") or {}
    key = run.items_ref.get("key")
    if "items" not in p:
        why = p.get("read_error") or "the server did not attach it"
        routing.server_step_failed(
            state,
            run,
            LoopInNotListError(
                f"loop.in of step {step.name!r} ({step.loop.path}.in) is the result reference {key!r}, "
                f"which could not be read: {why}; rerun the step that produced it"
            ),
            em,
        )
        return
    _begin(state, step, run, p["items"], em, f"the result reference {key!r}, which holds")


def _begin(
    state: ExecutionState, step: Step, run: RunState, items: Any, em: Emitter, what: str = "rendered to"
) -> None:
    assert step.loop is not None
    if not isinstance(items, list):
        routing.server_step_failed(
            state,
            run,
            LoopInNotListError(
                f"loop.in of step {step.name!r} ({step.loop.path}.in) {what} "
                f"{type(items).__name__}, not a list: make the expression return a list"
            ),
            em,
        )
        return
    most = execution_limit(state, "max_loop_items", DEFAULT_MAX_LOOP_ITEMS)
    if len(items) > most:
        err = LoopSizeLimitError(
            f"loop.in of step {step.name!r} ({step.loop.path}.in) has {len(items)} elements; the limit is "
            f"{most} (executor.spec.policy.limits.max_loop_items): page the input, or raise the limit"
        )
        routing.unhandled(state, err.to_dict())
        routing.server_step_failed(state, run, err, em)
        return
    if (oversize := too_large(state, run)) is not None:
        routing.server_step_failed(state, run, oversize, em)
        return
    n = len(items)
    run.loop = LoopState(items=items, total=n, results=[None] * n, finished=bytearray(n))
    em.event(
        "loop.started",
        "loop",
        step.name,
        "in_progress",
        {"total": len(items), "mode": step.loop.mode, "iterator": step.loop.iterator},
        run,
    )
    _dispatch(state, step, run, em)
    maybe_end_loop(state, run, em)


def _dispatch(state: ExecutionState, step: Step, run: RunState, em: Emitter) -> None:
    loop, spec = run.loop, step.loop
    assert loop is not None and spec is not None
    if spec.exec == "local":
        _dispatch_local(state, spec, run, em)
        return
    cap = spec.max_in_flight if spec.mode == "parallel" else 1
    while (
        loop.in_flight < cap
        and loop.next_index < loop.total
        and not loop.stopped
        and not state.failed
        and not state.paused  # SEMANTICS §17: a paused execution starts no new iteration
    ):
        i = loop.next_index
        loop.next_index += 1
        loop.in_flight += 1
        iter_: dict[str, Any] = {spec.iterator: loop.items[i], "index": i}
        loop.items[i] = None  # sent: only a rebuild needs it again, and a rebuild reads it anew
        if state.parent_iter is not None:  # a child of a loop iteration sees it as iter.parent (§19)
            iter_["parent"] = state.parent_iter
        em.command(run, index=i, iter_=iter_)


def _dispatch_local(state: ExecutionState, spec: Loop, run: RunState, em: Emitter) -> None:
    """``exec: local``: one command carries the whole loop to one worker, which runs the
    iterations and reports each with the same events; every iteration counts as in flight
    until its event (or the worker's ``loop.local.stopped`` for those it never started)."""
    loop = run.loop
    assert loop is not None
    if loop.next_index or not loop.total or loop.stopped or state.failed or state.paused:
        return
    loop.next_index = loop.in_flight = loop.total
    key = f"{state.execution_id}/{run.run_id}/loop.items"
    # items read from a reference go to the worker as that reference: no second copy is stored
    items = run.items_ref or by_reference(state, loop.items, key, em.out, limit=LOCAL_ITEMS_INLINE)
    loop.items = []  # all sent
    local: dict[str, Any] = {
        "items": items,
        "iterator": spec.iterator,
        "max_in_flight": spec.max_in_flight if spec.mode == "parallel" else 1,
        "fail_fast": state.playbook.step(run.step).failure_mode == "fail_fast",
    }
    if state.parent_iter is not None:
        local["parent"] = state.parent_iter
    em.command(run, local=local)


def on_local_stopped(state: ExecutionState, run: RunState, event: Event, em: Emitter) -> None:
    """The worker of an ``exec: local`` loop started no more iterations (a fail_fast failure, a
    cancel, the run stopped): those it never started are no longer in flight."""
    loop = run.loop
    if loop is None:
        return
    never = [
        i
        for i in (event.get("payload") or {}).get("skipped") or ()
        if isinstance(i, int) and 0 <= i < loop.total and not loop.finished[i]
    ]
    for i in never:
        loop.finished[i] = 1
    loop.in_flight -= len(never)
    loop.next_index -= len(never)  # never started: the loop ends as one stopped early would
    loop.stopped = True
    maybe_end_loop(state, run, em)


def resume_loop(state: ExecutionState, run: RunState, em: Emitter) -> None:
    """The execution resumed: the iterations the pause held back start now."""
    _dispatch(state, state.playbook.step(run.step), run, em)
    maybe_end_loop(state, run, em)


def on_iteration(state: ExecutionState, run: RunState, event: Event, em: Emitter) -> None:
    loop = run.loop
    assert loop is not None
    p = event.get("payload") or {}
    i = p.get("index")
    if not isinstance(i, int) or not 0 <= i < loop.total or loop.finished[i]:
        return
    loop.finished[i] = 1
    loop.in_flight -= 1
    step = state.playbook.step(run.step)
    ok, error = event["name"] == "loop.iteration.done", p.get("error")
    if step.loop is not None and step.loop.reducers:
        try:  # SEMANTICS §20: declared keys combine in log order; all of the iteration's writes or none
            where = f"loop step {run.step!r}, iteration {i}"
            state.ctx = apply_reduced(state.ctx, p.get("ctx_patches") or [], step.loop.reducers, where)
        except ReducerTypeError as e:
            ok, error = False, e.to_dict()
    else:
        routing.apply_patches(state, p)
    if ok:
        loop.done += 1
        loop.results[i] = p.get("result")
    else:
        loop.failed += 1
        if loop.first_error is None:
            loop.first_error = error
        if step.failure_mode == "fail_fast":
            loop.stopped = True
    _dispatch(state, step, run, em)
    maybe_end_loop(state, run, em)


def maybe_end_loop(state: ExecutionState, run: RunState, em: Emitter) -> None:
    loop = run.loop
    if loop is None or loop.in_flight or run.status != "running":
        return
    exhausted = loop.next_index >= loop.total
    if not (exhausted or loop.stopped or state.failed):
        return
    step = state.playbook.step(run.step)
    counts = {"total": loop.total, "done": loop.done, "failed": loop.failed}
    em.out.ended_loops.append(run.run_id)
    if loop.failed and step.failure_mode == "fail_fast":
        said = f"an iteration of loop step {run.step} failed"
        err = dict(loop.first_error or IterationFailedError(said).to_dict())
        err.setdefault("message", said)
        payload: dict[str, Any] = {"result": None, "error": err, **counts}
        em.event("step.failed", "step", run.step, "error", payload, run)
        routing.on_terminal(state, run, "step.failed", payload, em)
    elif not exhausted:
        err = AbortedError(
            f"loop step {run.step} stopped: the execution was "
            + ("cancelled" if state.cancelled else "already failed")
        ).to_dict()
        payload = {"result": None, "error": err, **counts}
        em.event("step.failed", "step", run.step, "error", payload, run)
        routing.on_terminal(state, run, "step.failed", payload, em)
    else:
        key = f"{state.execution_id}/{run.run_id}/loop.done"
        result = by_reference(state, loop.results, key, em.out, step=step)
        payload = {**counts, "result": result}
        em.event("loop.done", "loop", run.step, "success", payload, run)
        routing.on_terminal(state, run, "loop.done", payload, em)
