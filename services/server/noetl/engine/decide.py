"""The engine: ``decide(state, event) -> Decision(events, commands)``.

Pure and deterministic. It reads no clock (an output event carries the timestamp of the event
that caused it), draws no random numbers (ids derive from the causing event's id) and does no
I/O (the request adapter resolves the keychain and the playbook text before the request event is
written). Domain failures never raise: they become ``step.failed`` or a failed
``workflow.finished``. ``decide`` updates ``state`` in place: the state is the fold accumulator.

Inputs are the events listed in ``subjects.SERVER_INPUT_EVENTS`` written by anyone but the server
itself, plus ``playbook.execution.requested``; the engine's own outputs are never fed back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.cache import parse_playbook, template_engine
from noetl.dsl.errors import (
    EventBytesLimitError,
    LoopInNotListError,
    LoopSizeLimitError,
    NoetlError,
    PayloadTooLargeError,
    StepRunLimitError,
    TemplateError,
)
from noetl.dsl.model import Step
from noetl.dsl.policy import admit, apply_patch, evaluate_arcs
from noetl.dsl.specmerge import deep_merge, effective_step_spec
from noetl.engine.state import ExecutionState, LoopState, RunState
from noetl.events.envelope import dumps, make_event, trace_of
from noetl.events.ids import derive_id
from noetl.events.refs import make_reference
from noetl.events.subjects import DEFAULT_POOL


@dataclass
class Decision:
    events: list[dict[str, Any]] = field(default_factory=list)
    commands: list[dict[str, Any]] = field(default_factory=list)
    # (key, bytes) to store in the results object store before the events that refer to them
    objects: list[tuple[str, bytes]] = field(default_factory=list)
    # step runs of loops that ended: no iteration of theirs runs again, so their snapshots can go
    ended_loops: list[str] = field(default_factory=list)


DEFAULT_PAYLOAD_LIMIT = 65_536
# JetStream refuses messages over 1 MiB; keep room for the envelope
MAX_EVENT_PAYLOAD = 256 * 1024
MAX_COMMAND_BYTES = 900 * 1024


def _size(value: Any) -> int:
    return len(dumps(value))


def payload_limit(state: ExecutionState, step: Step | None = None) -> int:
    """``policy.limits.max_payload_bytes`` as layered for the step (executor → step → loop)."""
    if step is not None:
        spec = effective_step_spec(state.playbook, step)
    else:
        spec = state.playbook.executor.get("spec") or {}
    limits = (spec.get("policy") or {}).get("limits") or {}
    return int(limits.get("max_payload_bytes", DEFAULT_PAYLOAD_LIMIT))


DEFAULT_MAX_STEP_RUNS = 10_000
DEFAULT_MAX_EVENT_BYTES = 1 << 30
DEFAULT_MAX_LOOP_ITEMS = 100_000


def execution_limit(state: ExecutionState, name: str, default: int) -> int:
    """``executor.spec.policy.limits.<name>``: bounds an execution as a whole, so only the
    executor's spec sets it."""
    limits = ((state.playbook.executor.get("spec") or {}).get("policy") or {}).get("limits") or {}
    value = limits.get(name, default)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def _too_large(state: ExecutionState, run: RunState) -> PayloadTooLargeError | None:
    """A command carries ctx, workload and args; one over JetStream's limit could never be sent."""
    size = _size({"ctx": state.ctx, "workload": state.workload, "args": run.args})
    if size <= MAX_COMMAND_BYTES:
        return None
    return PayloadTooLargeError(
        f"step {run.step}: its command would carry {size} bytes of ctx, workload and args "
        f"(limit {MAX_COMMAND_BYTES}); keep large data in task results (they travel by reference) "
        "and put only references or small values in ctx"
    )


def by_reference(
    state: ExecutionState,
    value: Any,
    key: str,
    out: Decision,
    limit: int | None = None,
    step: Step | None = None,
) -> Any:
    """A value too large for an event leaves as ``{store, key, size, checksum}`` (SEMANTICS §11).

    Pure: the bytes and the reference are computed here; the adapter stores the bytes before it
    publishes the event, so a reader never sees a reference to nothing.
    """
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if limit is None:
        limit = payload_limit(state, step)
    data = dumps(value)
    if len(data) <= limit:
        return value
    out.objects.append((key, data))
    return make_reference(key, data)


class _Emitter:
    """Builds the outputs of one input event with ids derived from it."""

    def __init__(self, state: ExecutionState, cause: dict[str, Any]) -> None:
        self.state = state
        self.cause_id = cause["event_id"]
        self.ts = cause.get("timestamp", "")
        self.n = 0
        self.out = Decision()

    def event(
        self,
        name: str,
        entity_type: str,
        entity_id: str,
        status: str,
        payload: dict[str, Any] | None = None,
        run: RunState | None = None,
    ) -> dict[str, Any]:
        self.n += 1
        size = _size(payload) if payload else 0
        self.state.event_bytes += size
        if size > MAX_EVENT_PAYLOAD:
            key = f"{self.state.execution_id}/events/{derive_id(self.cause_id, self.n)}"
            payload = {"payload_ref": by_reference(self.state, payload, key, self.out, limit=0)}
        ev = make_event(
            event_id=derive_id(self.cause_id, self.n),
            execution_id=self.state.execution_id,
            timestamp=self.ts,
            source="server",
            name=name,
            entity_type=entity_type,  # type: ignore[arg-type]
            entity_id=entity_id,
            status=status,
            payload=payload,  # type: ignore[arg-type]
            step_run_id=run.run_id if run else None,
            parent_execution_id=self.state.parent_execution_id,
            trace_id=self.state.trace_id,
            cause_id=self.cause_id,
        )
        self.out.events.append(ev)
        return ev

    def command(
        self, run: RunState, *, index: int | None = None, iter_: dict[str, Any] | None = None
    ) -> None:
        self.n += 1
        st = self.state
        step = st.playbook.step(run.step)
        pool = str(effective_step_spec(st.playbook, step).get("pool") or DEFAULT_POOL)
        self.out.commands.append(
            {
                "command_id": derive_id(self.cause_id, self.n, "command"),
                "execution_id": st.execution_id,
                "pool": pool,
                "step": run.step,
                "step_run_id": run.run_id,
                "index": index,
                "iter": iter_,
                "args": run.args,
                "ctx": st.ctx,
                "workload": st.workload,
                "playbook_digest": st.playbook.digest,
                "partition": st.partition,
                "parent_execution_id": st.parent_execution_id,
                "trace_id": st.trace_id,
                "timestamp": self.ts,
                "schema_version": 1,
            }
        )


def _event_view(name: str, status: str, payload: dict[str, Any]) -> dict[str, Any]:
    """What arcs and admission see as ``event``."""
    return {
        "name": name,
        "status": status,
        "result": payload.get("result"),
        "error": payload.get("error"),
        "payload": payload,
    }


def new_state(event: dict[str, Any]) -> ExecutionState:
    """The state an execution starts in, from its ``playbook.execution.requested`` event."""
    p = event["payload"]
    playbook = parse_playbook(p["playbook"], p.get("file") or p.get("path") or "<request>")
    workload = deep_merge(playbook.workload, p.get("payload") or {})
    return ExecutionState(
        execution_id=event["execution_id"],
        playbook=playbook,
        workload=workload,
        parent_execution_id=event.get("parent_execution_id"),
        trace_id=trace_of(event),
        partition=int(p.get("partition", 0)),
    )


def is_input(event: dict[str, Any]) -> bool:
    name = event.get("name")
    if name in ("playbook.execution.requested", "execution.cancel.requested"):
        return True
    return event.get("source") == "worker" and name in (
        "step.done",
        "step.failed",
        "loop.iteration.done",
        "loop.iteration.failed",
    )


# filter work one decision's renders may do together (each render also has its own limit): the
# server decides inputs one after another, so this bounds how long one input can hold the others
DECISION_WORK = 2_000_000


def decide(state: ExecutionState, event: dict[str, Any]) -> Decision:
    with template_engine(state.playbook).shared_budget(DECISION_WORK):
        return _decide(state, event)


def _decide(state: ExecutionState, event: dict[str, Any]) -> Decision:
    em = _Emitter(state, event)
    if state.finished:
        return em.out
    name = event["name"]
    state.folded_inputs += 1
    state.event_bytes += _size(event.get("payload") or {})
    if name == "playbook.execution.requested":
        _on_requested(state, event, em)
    elif name in ("step.done", "step.failed"):
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.status == "running" and run.loop is None:
            payload = event.get("payload") or {}
            _apply_patches(state, payload)
            _on_terminal(state, run, name, payload, em)
    elif name in ("loop.iteration.done", "loop.iteration.failed"):
        run = state.runs.get(event.get("step_run_id") or "")
        if run is not None and run.loop is not None and run.status == "running":
            _on_iteration(state, run, event, em)
    elif name == "execution.cancel.requested" and not state.cancelled:
        reason = (event.get("payload") or {}).get("reason") or "cancelled by request"
        state.cancelled = True
        _unhandled(state, {"kind": "cancelled", "retryable": False, "message": str(reason)})
        for run in state.runs.values():
            if run.loop is not None and run.status == "running":
                _maybe_end_loop(state, run, em)
    _check_event_bytes(state, em)
    _maybe_finish(state, em)
    return em.out


def _check_event_bytes(state: ExecutionState, em: _Emitter) -> None:
    """Past ``max_event_bytes`` the execution fails: nothing new starts, what runs finishes."""
    most = execution_limit(state, "max_event_bytes", DEFAULT_MAX_EVENT_BYTES)
    if state.failed or state.event_bytes <= most:
        return
    _unhandled(
        state,
        EventBytesLimitError(
            f"the execution's events reached {state.event_bytes} bytes; the limit is {most} "
            "(executor.spec.policy.limits.max_event_bytes): keep large data in results (they travel by "
            "reference), page long loops, or raise the limit"
        ).to_dict(),
    )
    for run in state.runs.values():
        if run.loop is not None and run.status == "running":
            _maybe_end_loop(state, run, em)


# --- request -------------------------------------------------------------------------------


def _on_requested(state: ExecutionState, event: dict[str, Any], em: _Emitter) -> None:
    p = event["payload"]
    missing = list(p.get("keychain_missing") or [])
    meta = state.playbook.metadata
    evaluated = {"path": meta.path, "version": meta.version, "name": meta.name}
    if missing:
        err = {
            "kind": "keychain_unresolved",
            "retryable": False,
            "message": f"keychain entries do not resolve: {', '.join(missing)}; add them with "
            "`noetl credentials set` or pass --credentials FILE",
        }
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
    _arrive(state, "start", {}, None, em)


# --- tokens --------------------------------------------------------------------------------


def _context(state: ExecutionState, args: dict[str, Any], event: dict[str, Any] | None) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "workload": state.workload,
        "ctx": state.ctx,
        "args": args,
        "execution_id": state.execution_id,
    }
    if event is not None:
        ctx["event"] = event
    return ctx


def _arrive(
    state: ExecutionState, step_name: str, args: dict[str, Any], trigger: dict[str, Any] | None, em: _Emitter
) -> None:
    """A token reaches a step: admission, then scheduling (SEMANTICS §7)."""
    step = state.playbook.step(step_name)
    state.run_counter += 1
    run = RunState(
        run_id=derive_id(state.execution_id, "run", state.run_counter)[:20],
        step=step_name,
        seq=state.run_counter,
        args=args,
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
        _unhandled(state, err.to_dict())  # first: no arc may fire after this failure
        _server_step_failed(state, run, err, em)
        return
    engine = template_engine(state.playbook)
    try:
        allowed = admit(step.admit, _context(state, args, trigger), engine, f"{step.path}.spec.policy.admit")
    except NoetlError as e:
        _server_step_failed(state, run, e, em)
        return
    if not allowed:
        run.status = "skipped"
        state.pending -= 1
        em.event("step.skipped", "step", step_name, "skipped", {"args": args}, run)
        return
    em.event("step.scheduled", "step", step_name, "in_progress", {"args": args}, run)
    if step.loop is not None:
        _start_loop(state, step, run, trigger, em)
    elif not step.tool:
        payload = {"result": None}
        em.event("step.done", "step", step_name, "success", payload, run)
        _on_terminal(state, run, "step.done", payload, em)
    elif (too_large := _too_large(state, run)) is not None:
        _server_step_failed(state, run, too_large, em)
    else:
        em.command(run)


def _server_step_failed(state: ExecutionState, run: RunState, err: NoetlError, em: _Emitter) -> None:
    payload = {"result": None, "error": err.to_dict()}
    em.event("step.failed", "step", run.step, "error", payload, run)
    _on_terminal(state, run, "step.failed", payload, em)


def _apply_patches(state: ExecutionState, payload: dict[str, Any]) -> None:
    for patch in payload.get("ctx_patches") or ():
        state.ctx = apply_patch(state.ctx, patch)


def _on_terminal(
    state: ExecutionState, run: RunState, name: str, payload: dict[str, Any], em: _Emitter
) -> None:
    """A step run ended: record it, fire its arcs (SEMANTICS §8) or note a leaf or a failure."""
    failed = name == "step.failed"
    run.status = "failed" if failed else "done"
    run.result = payload.get("result")
    run.error = payload.get("error")
    state.pending -= 1
    if state.failed:
        return  # after an unhandled failure, arcs no longer fire
    step = state.playbook.step(run.step)
    status = "error" if failed else "success"
    view = _event_view(name, status, payload)
    try:
        fired = evaluate_arcs(step.next, _context(state, run.args, view), template_engine(state.playbook))
    except TemplateError as e:
        _unhandled(state, e.to_dict())
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
            _unhandled(state, run.error or {"kind": "step_failed", "message": f"step {run.step} failed"})
        else:
            state.result = run.result
        return
    for f in fired:
        _arrive(state, f.step, f.args, view, em)


def _unhandled(state: ExecutionState, error: dict[str, Any]) -> None:
    if not state.failed:
        state.failed, state.error = True, error


# --- loops ---------------------------------------------------------------------------------


def _start_loop(
    state: ExecutionState, step: Step, run: RunState, trigger: dict[str, Any] | None, em: _Emitter
) -> None:
    assert step.loop is not None
    try:
        items = template_engine(state.playbook).render(
            step.loop.in_, _context(state, run.args, trigger), f"{step.loop.path}.in"
        )
    except NoetlError as e:
        _server_step_failed(state, run, e, em)
        return
    if not isinstance(items, list):
        _server_step_failed(
            state,
            run,
            LoopInNotListError(
                f"loop.in of step {step.name!r} ({step.loop.path}.in) rendered to "
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
        _unhandled(state, err.to_dict())
        _server_step_failed(state, run, err, em)
        return
    if (too_large := _too_large(state, run)) is not None:
        _server_step_failed(state, run, too_large, em)
        return
    run.loop = LoopState(items=items, results=[None] * len(items), finished=[False] * len(items))
    em.event(
        "loop.started",
        "loop",
        step.name,
        "in_progress",
        {"total": len(items), "mode": step.loop.mode, "iterator": step.loop.iterator},
        run,
    )
    _dispatch(state, step, run, em)
    _maybe_end_loop(state, run, em)


def _dispatch(state: ExecutionState, step: Step, run: RunState, em: _Emitter) -> None:
    loop, spec = run.loop, step.loop
    assert loop is not None and spec is not None
    cap = spec.max_in_flight if spec.mode == "parallel" else 1
    while loop.in_flight < cap and loop.next_index < loop.total and not loop.stopped and not state.failed:
        i = loop.next_index
        loop.next_index += 1
        loop.in_flight += 1
        em.command(run, index=i, iter_={spec.iterator: loop.items[i], "index": i})


def _on_iteration(state: ExecutionState, run: RunState, event: dict[str, Any], em: _Emitter) -> None:
    loop = run.loop
    assert loop is not None
    p = event.get("payload") or {}
    i = p.get("index")
    if not isinstance(i, int) or not 0 <= i < loop.total or loop.finished[i]:
        return
    loop.finished[i] = True
    loop.in_flight -= 1
    step = state.playbook.step(run.step)
    _apply_patches(state, p)
    if event["name"] == "loop.iteration.done":
        loop.done += 1
        loop.results[i] = p.get("result")
    else:
        loop.failed += 1
        if loop.first_error is None:
            loop.first_error = p.get("error")
        if step.failure_mode == "fail_fast":
            loop.stopped = True
    _dispatch(state, step, run, em)
    _maybe_end_loop(state, run, em)


def _maybe_end_loop(state: ExecutionState, run: RunState, em: _Emitter) -> None:
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
        err = dict(loop.first_error or {"kind": "iteration_failed"})
        err.setdefault("message", f"an iteration of loop step {run.step} failed")
        payload = {"result": None, "error": err, **counts}
        em.event("step.failed", "step", run.step, "error", payload, run)
        _on_terminal(state, run, "step.failed", payload, em)
    elif not exhausted:
        err = {
            "kind": "aborted",
            "retryable": False,
            "message": f"loop step {run.step} stopped: the execution was "
            + ("cancelled" if state.cancelled else "already failed"),
        }
        payload = {"result": None, "error": err, **counts}
        em.event("step.failed", "step", run.step, "error", payload, run)
        _on_terminal(state, run, "step.failed", payload, em)
    else:
        key = f"{state.execution_id}/{run.run_id}/loop.done"
        result = by_reference(state, loop.results, key, em.out, step=step)
        payload = {**counts, "result": result}
        em.event("loop.done", "loop", run.step, "success", payload, run)
        _on_terminal(state, run, "loop.done", payload, em)


# --- the end -------------------------------------------------------------------------------


def _maybe_finish(state: ExecutionState, em: _Emitter) -> None:
    if state.finished or state.pending > 0:
        return
    state.finished = True
    state.status = "cancelled" if state.cancelled else "failed" if state.failed else "success"
    ctx = by_reference(state, state.ctx, f"{state.execution_id}/ctx", em.out) if state.ctx else state.ctx
    em.event(
        "workflow.finished",
        "workflow",
        state.execution_id,
        "error" if state.failed else "success",
        {
            "status": state.status,
            "result": None if state.failed else state.result,
            "error": state.error,
            "ctx": ctx,
        },
    )
    em.event(
        "playbook.processed",
        "playbook",
        state.execution_id,
        "error" if state.failed else "success",
        {"status": state.status},
    )
