"""The engine: ``decide(state, event) -> Decision(events, commands)``.

Pure and deterministic. It reads no clock (an output event carries the timestamp of the event
that caused it), draws no random numbers (ids derive from the causing event's id) and does no
I/O (the request adapter resolves the keychain and the playbook text before the request event is
written). Domain failures never raise: they become ``step.failed`` or a failed
``workflow.finished``. ``decide`` updates ``state`` in place: the state is the fold accumulator.

Inputs are the events listed in ``subjects.SERVER_INPUT_EVENTS`` written by anyone but the server
itself, plus ``playbook.execution.requested``; the engine's own outputs are never fed back, but
for ``loop.items.read``: the engine writes it to ask for the value of a ``loop.in`` reference and
decides it when it comes back with that value, attached by the adapter (``Catalog.with_playbook_text``).
"""

from __future__ import annotations

from typing import Any, cast

from noetl.dsl.cache import parse_playbook, template_engine
from noetl.dsl.errors import (
    EventBytesLimitError,
    ExecutionCancelledError,
    KeychainKindMismatchError,
    KeychainUnresolvedError,
    RerunRefusedError,
)
from noetl.dsl.specmerge import deep_merge
from noetl.engine import loops, outside, routing
from noetl.engine.emitter import Decision, Emitter
from noetl.engine.endings import ending
from noetl.engine.limits import DEFAULT_MAX_EVENT_BYTES, by_reference, execution_limit, size
from noetl.engine.state import EventView, ExecutionState
from noetl.events import vocabulary
from noetl.events.envelope import Event, trace_of

__all__ = ["Decision", "decide", "is_input", "new_state"]


def new_state(event: Event) -> ExecutionState:
    """The state an execution starts in, from its ``playbook.execution.requested`` event."""
    p = event["payload"]
    playbook = parse_playbook(p["playbook"], p.get("file") or p.get("path") or "<request>")
    workload = deep_merge(playbook.workload, p.get("payload") or {})
    return ExecutionState(
        execution_id=event["execution_id"],
        playbook=playbook,
        workload=workload,
        parent_execution_id=event.get("parent_execution_id"),
        parent_iter=p["parent_iter"] if isinstance(p.get("parent_iter"), dict) else None,
        trace_id=trace_of(event),
        partition=int(p.get("partition", 0)),
    )


def is_input(event: Event) -> bool:
    """Whether the engine decides on this event: the outside inputs whoever wrote them, and a
    worker's terminal events (the server writes step.done / step.failed too, as outputs)."""
    name = event.get("name")
    if name in _OUTSIDE_INPUTS:
        return True
    return event.get("source") == "worker" and name in _WORKER_TERMINALS


_OUTSIDE_INPUTS = frozenset(vocabulary.OUTSIDE_INPUTS)
_WORKER_TERMINALS = frozenset(vocabulary.WORKER_TERMINAL_EVENTS)


# filter work one decision's renders may do together (each render also has its own limit): the
# server decides inputs one after another, so this bounds how long one input can hold the others
DECISION_WORK = 2_000_000


def decide(state: ExecutionState, event: Event) -> Decision:
    with template_engine(state.playbook).shared_budget(DECISION_WORK):
        return _decide(state, event)


def _decide(state: ExecutionState, event: Event) -> Decision:
    em = Emitter(state, event)
    if state.finished:
        return em.out
    name = event["name"]
    state.folded_inputs += 1
    state.event_bytes += _input_bytes(event)
    if name == "playbook.execution.requested":
        _on_requested(state, event, em)
    elif name in ("step.done", "step.failed"):
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.status == "running" and run.loop is None:
            payload = event.get("payload") or {}
            routing.apply_patches(state, payload)
            routing.on_terminal(state, run, name, payload, em)
    elif name in ("loop.iteration.done", "loop.iteration.failed"):
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.loop is not None and run.status == "running":
            loops.on_iteration(state, run, event, em)
    elif name == "loop.items.read":
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.items_ref is not None and run.loop is None and run.status == "running":
            loops.on_items_read(state, run, event, em)
    elif name == "loop.local.stopped":
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.loop is not None and run.status == "running":
            loops.on_local_stopped(state, run, event, em)
    elif name == "execution.cancel.requested" and not state.cancelled:
        reason = (event.get("payload") or {}).get("reason") or "cancelled by request"
        state.cancelled = True
        routing.unhandled(state, ExecutionCancelledError(str(reason)).to_dict())
        for run in state.runs.values():
            if run.loop is not None and run.status == "running":
                loops.maybe_end_loop(state, run, em)
    elif name == "timer.fired":
        outside.on_timer(state, event, em)
    elif name == "signal.received":
        outside.on_signal(state, event, em)
    elif name == "execution.pause.requested":
        outside.on_pause(state, event, em)
    elif name == "execution.resume.requested":
        outside.on_resume(state, event, em)
    elif name == "execution.abort.requested":
        outside.on_abort(state, event, em)
    _check_event_bytes(state, em)
    outside.stop_idle(state, em)
    _maybe_finish(state, em)
    return em.out


def _input_bytes(event: Event) -> int:
    """What an input adds to the execution's event bytes: the items the adapter attached to a
    ``loop.items.read`` are not in the event as stored (they stay in the object store)."""
    payload = event.get("payload") or {}
    if event["name"] == "loop.items.read":
        payload = {k: v for k, v in payload.items() if k not in ("items", "read_error")}
    return size(payload)


def _check_event_bytes(state: ExecutionState, em: Emitter) -> None:
    """Past ``max_event_bytes`` the execution fails: nothing new starts, what runs finishes."""
    most = execution_limit(state, "max_event_bytes", DEFAULT_MAX_EVENT_BYTES)
    if state.failed or state.event_bytes <= most:
        return
    routing.unhandled(
        state,
        EventBytesLimitError(
            f"the execution's events reached {state.event_bytes} bytes; the limit is {most} "
            "(executor.spec.policy.limits.max_event_bytes): keep large data in results (they travel by "
            "reference), page long loops, or raise the limit"
        ).to_dict(),
    )
    for run in state.runs.values():
        if run.loop is not None and run.status == "running":
            loops.maybe_end_loop(state, run, em)


def _on_requested(state: ExecutionState, event: Event, em: Emitter) -> None:
    p = event["payload"]
    missing = list(p.get("keychain_missing") or [])
    meta = state.playbook.metadata
    evaluated = {"path": meta.path, "version": meta.version, "name": meta.name}
    mismatched = [m for m in p.get("keychain_mismatch") or () if isinstance(m, dict)]
    err: dict[str, object] | None = None
    if missing:
        err = KeychainUnresolvedError(
            f"keychain entries do not resolve: {', '.join(missing)}; add them with "
            "`noetl credentials set` or pass --credentials FILE"
        ).to_dict()
    elif mismatched:
        at = {e.name: i for i, e in enumerate(state.playbook.keychain)}
        said = "; ".join(
            f"{m.get('name')!r} is declared `kind: {m.get('declared')}` "
            f"(keychain[{at.get(str(m.get('name')))}]) but stored as {m.get('stored')!r}"
            for m in mismatched
        )
        err = KeychainKindMismatchError(
            f"keychain kinds do not match the stored entries: {said}. The declared kind decides what of "
            "an entry is masked and how it is read: declare the stored kind in the playbook's `keychain`, "
            "or store the entry again with the declared kind (`noetl credentials set NAME --kind KIND`)",
            entries=mismatched,
        ).to_dict()
    if err is not None:
        em.event(
            "playbook.request.evaluated", "playbook", state.execution_id, "error", {**evaluated, "error": err}
        )
        state.failed, state.error = True, err
        return
    em.event("playbook.request.evaluated", "playbook", state.execution_id, "success", evaluated)
    em.event(
        "workflow.started",
        "workflow",
        state.execution_id,
        "in_progress",
        {"workload_keys": sorted(state.workload)},
    )
    outside.on_started(state, em)
    fork = p.get("fork")
    if isinstance(fork, dict):
        _on_forked(state, fork, em)
        return
    routing.arrive(state, "start", {}, None, em)


def _on_forked(state: ExecutionState, fork: dict[str, Any], em: Emitter) -> None:
    """A rerun (issue 31): the tokens start where the original's chosen runs started, with the
    ctx, ``args`` and arc event the original had there (``engine.fork`` computed them from its
    log), instead of at ``start``; what ran before that point is not run again."""
    runs = [r for r in fork.get("runs") or () if isinstance(r, dict)]
    names = {s.name for s in state.playbook.workflow}
    missing = [str(r.get("step")) for r in runs if r.get("step") not in names]
    em.event(
        "execution.forked",
        "workflow",
        state.execution_id,
        "in_progress",
        {
            "from_execution_id": fork.get("from_execution_id"),
            "from_steps": [r.get("step") for r in runs],
            "from_runs": [r.get("run_id") for r in runs],
            "kept": list(fork.get("kept") or []),
            "not_kept": list(fork.get("not_kept") or []),
        },
    )
    if missing or not runs:
        err = RerunRefusedError(
            f"the rerun starts at {', '.join(missing) or 'no step'}, which this playbook does not have: "
            "rerun from a step it has (noetl rerun ID --from STEP)"
        ).to_dict()
        state.failed, state.error = True, err
        return
    if isinstance(fork.get("ctx"), dict):
        state.ctx = fork["ctx"]
    for r in runs:
        args = a if isinstance(a := r.get("args"), dict) else {}
        trigger = cast("EventView | None", t if isinstance(t := r.get("trigger"), dict) else None)
        routing.arrive(state, str(r["step"]), args, trigger, em)


def _maybe_finish(state: ExecutionState, em: Emitter) -> None:
    if state.finished or state.pending > 0:
        return
    state.finished = True
    state.status = "cancelled" if state.cancelled else "failed" if state.failed else "success"
    ctx = by_reference(state, state.ctx, f"{state.execution_id}/ctx", em.out) if state.ctx else state.ctx
    for name, entity_type, status, payload in ending(
        state.status, result=None if state.failed else state.result, error=state.error, ctx=ctx
    ):
        em.event(name, entity_type, state.execution_id, status, payload)
