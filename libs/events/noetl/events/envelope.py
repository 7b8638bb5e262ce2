"""The event envelope (SEMANTICS.md §10) and the command a worker runs.

Wire models are open-world: unknown fields are ignored and ``schema_version`` travels along, so
an older and a newer service can run side by side during a rolling upgrade. The hot path builds
them as plain dicts (``make_event``) and validates with the models only at the edges.
"""

from __future__ import annotations

from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1

Source = Literal["server", "worker"]
EntityType = Literal["playbook", "workflow", "step", "task", "loop", "next"]
Status = Literal["in_progress", "success", "error", "skipped"]


class Event(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event_id: str
    execution_id: str
    timestamp: str
    source: Source
    name: str
    entity_type: EntityType
    entity_id: str
    status: Status
    payload: dict[str, Any] = Field(default_factory=dict)
    step_run_id: str | None = None
    task_run_id: str | None = None
    parent_execution_id: str | None = None
    trace_id: str | None = None
    cause_id: str | None = None
    schema_version: int = SCHEMA_VERSION


class Command(BaseModel):
    """One step run (or one loop iteration) for one worker."""

    model_config = ConfigDict(extra="ignore")

    command_id: str
    execution_id: str
    pool: str
    step: str
    step_run_id: str
    index: int | None = None  # loop iteration index
    iter: dict[str, Any] | None = None  # initial iter scope of a loop iteration
    args: dict[str, Any] = Field(default_factory=dict)
    ctx: dict[str, Any] = Field(default_factory=dict)
    workload: dict[str, Any] = Field(default_factory=dict)
    playbook_digest: str
    parent_execution_id: str | None = None
    trace_id: str | None = None
    timestamp: str = ""
    schema_version: int = SCHEMA_VERSION


def make_event(
    *,
    event_id: str,
    execution_id: str,
    timestamp: str,
    source: Source,
    name: str,
    entity_type: EntityType,
    entity_id: str,
    status: Status,
    payload: dict[str, Any] | None = None,
    step_run_id: str | None = None,
    task_run_id: str | None = None,
    parent_execution_id: str | None = None,
    trace_id: str | None = None,
    cause_id: str | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "event_id": event_id,
        "execution_id": execution_id,
        "timestamp": timestamp,
        "source": source,
        "name": name,
        "entity_type": entity_type,
        "entity_id": entity_id,
        "status": status,
        "payload": payload or {},
    }
    # Correlation fields travel only when they say something: about a third of a loop
    # iteration's bytes were nulls and a trace id repeating the execution id (docs/nats-contract.md).
    if step_run_id is not None:
        event["step_run_id"] = step_run_id
    if task_run_id is not None:
        event["task_run_id"] = task_run_id
    if parent_execution_id is not None:
        event["parent_execution_id"] = parent_execution_id
    if trace_id is not None and trace_id != execution_id:
        event["trace_id"] = trace_id
    if cause_id is not None:
        event["cause_id"] = cause_id
    event["schema_version"] = SCHEMA_VERSION
    return event


def trace_of(event: dict[str, Any]) -> str:
    """An event's trace id: absent on the wire when it is the execution's own id."""
    return str(event.get("trace_id") or event["execution_id"])


class WireError(ValueError):
    """A message that is not an event or command this process can read: malformed JSON, a
    missing or mistyped envelope field, or a ``schema_version`` newer than it knows."""

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


_EVENT_FIELDS = ("event_id", "execution_id", "name", "status")
_COMMAND_FIELDS = ("command_id", "execution_id", "step", "step_run_id")


def _decode(data: bytes | str, required: tuple[str, ...], what: str) -> dict[str, Any]:
    try:
        obj = loads(data)
    except ValueError as e:
        raise WireError(f"{what} is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise WireError(f"{what} is a JSON {type(obj).__name__}, not an object")
    bad = [k for k in required if not isinstance(obj.get(k), str)]
    if bad:
        raise WireError(f"{what} lacks the text field(s) {', '.join(bad)}")
    version = obj.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise WireError(f"{what} has schema_version {version!r}, not a whole number")
    if version > SCHEMA_VERSION:
        raise WireError(
            f"{what} has schema_version {version}; this process reads up to {SCHEMA_VERSION}: "
            "upgrade it (servers before workers, docs/operations.md)",
            newer=True,
        )
    return obj


def decode_event(data: bytes | str) -> dict[str, Any]:
    """The one place an event enters a process: the envelope's fields checked, the version read.
    Fields a newer writer added are kept and ignored (open world); a newer major version is
    refused rather than misread."""
    return _decode(data, _EVENT_FIELDS, "event")


def decode_command(data: bytes | str) -> dict[str, Any]:
    """The one place a command enters a worker (see ``decode_event``)."""
    return _decode(data, _COMMAND_FIELDS, "command")


def _fallback(value: Any) -> Any:
    return str(value)


def dumps(obj: Any) -> bytes:
    """Compact JSON (orjson: several times faster than the standard library on the hot path);
    values that JSON cannot hold become strings rather than crashing a service."""
    return orjson.dumps(obj, default=_fallback, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)
