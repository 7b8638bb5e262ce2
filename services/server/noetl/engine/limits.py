"""Execution limits and the reference-first rule for large values (SEMANTICS §11, issue 20):
what bounds an execution and what leaves an event as a reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from noetl.dsl.errors import PayloadTooLargeError
from noetl.dsl.model import Step
from noetl.dsl.specmerge import effective_step_spec
from noetl.engine.state import ExecutionState, RunState
from noetl.events.envelope import dumps
from noetl.events.refs import make_reference

if TYPE_CHECKING:  # the emitter uses these limits; a decision is only passed through here
    from noetl.engine.emitter import Decision

DEFAULT_PAYLOAD_LIMIT = 65_536


# JetStream refuses messages over 1 MiB; keep room for the envelope
MAX_EVENT_PAYLOAD = 256 * 1024


MAX_COMMAND_BYTES = 900 * 1024


def size(value: object) -> int:
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


def too_large(state: ExecutionState, run: RunState) -> PayloadTooLargeError | None:
    """A command carries ctx, workload and args; one over JetStream's limit could never be sent."""
    n_bytes = size({"ctx": state.ctx, "workload": state.workload, "args": run.args})
    if n_bytes <= MAX_COMMAND_BYTES:
        return None
    return PayloadTooLargeError(
        f"step {run.step}: its command would carry {n_bytes} bytes of ctx, workload and args "
        f"(limit {MAX_COMMAND_BYTES}); keep large data in task results (they travel by reference) "
        "and put only references or small values in ctx"
    )


def by_reference(
    state: ExecutionState,
    value: object,
    key: str,
    out: Decision,
    limit: int | None = None,
    step: Step | None = None,
) -> object:
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
