"""The event envelope (SEMANTICS.md §10) and the command a worker runs.

Wire types are open-world: unknown fields are kept and ignored and ``schema_version`` travels
along, so an older and a newer service can run side by side during a rolling upgrade. The hot path
builds them as plain dicts (``make_event``); they are checked against their types once, where
they enter a process (``decode_event``, ``decode_command``: ~3 µs a message).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NotRequired

import orjson
from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict  # pydantic reads TypedDicts from here before Python 3.12

from noetl.dsl.errors import WireError as WireError
from noetl.events.vocabulary import EntityType, EventName, Source, Status

__all__ = ["Command", "EntityType", "Event", "EventName", "Source", "Status", "WireError"]

SCHEMA_VERSION = 1

# What a checker sees of ``name``, ``source``, ``entity_type`` and ``status`` (the vocabulary's
# Literals), and what the run-time check reads (text): a value a newer writer added is not a
# reason to drop its event (open world), so pydantic must not enforce the Literals.
if TYPE_CHECKING:
    _Name = EventName
    _Source = Source
    _Entity = EntityType
    _Status = Status
else:
    _Name = _Source = _Entity = _Status = str


@with_config(ConfigDict(extra="allow"))  # open world
class Event(TypedDict):
    """An event as it travels and as every process holds it: a dict (the engine's hot path reads
    it by key and never pays for objects), typed here, and checked against this type once, where
    it enters a process (``decode_event``). ``source``, ``entity_type`` and ``status`` take the
    values of ``Source``, ``EntityType`` and ``Status``, ``name`` those of ``EventName``
    (``noetl.events.vocabulary``) for a type checker; the run-time check reads them as text so a
    newer writer's value is not a reason to drop an event."""

    event_id: str
    execution_id: str
    timestamp: NotRequired[str]
    source: NotRequired[_Source]
    name: _Name
    entity_type: NotRequired[_Entity]
    entity_id: NotRequired[str]
    status: _Status
    payload: NotRequired[dict[str, Any]]
    step_run_id: NotRequired[str | None]
    task_run_id: NotRequired[str | None]
    parent_execution_id: NotRequired[str | None]
    trace_id: NotRequired[str | None]
    cause_id: NotRequired[str | None]
    schema_version: NotRequired[int]


@with_config(ConfigDict(extra="allow"))
class Command(TypedDict):
    """One step run (or one loop iteration, or a whole ``exec: local`` loop) for one worker: typed
    and checked like ``Event``, once, where it enters the worker (``decode_command``)."""

    command_id: str
    execution_id: str
    pool: NotRequired[str]
    step: str
    step_run_id: str
    index: NotRequired[int | None]  # loop iteration index
    iter: NotRequired[dict[str, Any] | None]  # initial iter scope of a loop iteration
    args: NotRequired[dict[str, Any] | None]
    ctx: NotRequired[Any]  # the execution's ctx, or a reference to it
    workload: NotRequired[Any]
    playbook_digest: NotRequired[str]
    local: NotRequired[dict[str, Any]]  # a whole exec: local loop for one worker (SEMANTICS §21)
    partition: NotRequired[int | None]
    parent_execution_id: NotRequired[str | None]
    trace_id: NotRequired[str | None]
    timestamp: NotRequired[str]
    schema_version: NotRequired[int]


_EVENT = TypeAdapter(Event)
_COMMAND = TypeAdapter(Command)


def make_event(
    *,
    event_id: str,
    execution_id: str,
    timestamp: str,
    source: Source,
    name: EventName,
    entity_type: EntityType,
    entity_id: str,
    status: Status,
    payload: dict[str, Any] | None = None,
    step_run_id: str | None = None,
    task_run_id: str | None = None,
    parent_execution_id: str | None = None,
    trace_id: str | None = None,
    cause_id: str | None = None,
) -> Event:
    """An event as a plain dict (the hot path never builds an object), with the correlation
    fields that say something: the one way events are built."""
    event: Event = {
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


def trace_of(event: Event | dict[str, Any]) -> str:
    """An event's trace id: absent on the wire when it is the execution's own id."""
    return str(event.get("trace_id") or event["execution_id"])


_KINDS = {"int": "a whole number", "str": "text", "dict": "an object"}


def _decode(data: bytes | str, adapter: TypeAdapter[Any], what: str) -> dict[str, Any]:
    try:
        obj = loads(data)
    except ValueError as e:
        raise WireError(f"{what} is not JSON: {e}") from None
    return _check(obj, adapter, what)


def _check(obj: Any, adapter: TypeAdapter[Any], what: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise WireError(f"{what} is a JSON {type(obj).__name__}, not an object")
    try:
        adapter.validate_python(obj, strict=True)  # checked, not rebuilt: the dict goes on as it is
    except ValidationError as e:
        missing = [str(err["loc"][0]) for err in e.errors() if err["type"] == "missing"]
        if missing:
            raise WireError(f"{what} lacks the field(s) {', '.join(missing)}") from None
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        want = next((v for k, v in _KINDS.items() if err["type"].startswith(k)), err["msg"])
        raise WireError(f"{what} field {field} is {obj.get(str(err['loc'][0]))!r}, not {want}") from None
    version = obj.get("schema_version", 1)
    if version > SCHEMA_VERSION:
        raise WireError(
            f"{what} has schema_version {version}; this process reads up to {SCHEMA_VERSION}: "
            "upgrade it (servers before workers, docs/operations.md)",
            newer=True,
        )
    return obj


def decode_event(data: bytes | str) -> Event:
    """The one place an event enters a process: checked against ``Event``, the version read.
    Fields a newer writer added are kept and ignored (open world); a newer major version is
    refused rather than misread."""
    return _decode(data, _EVENT, "event")  # type: ignore[return-value]


def check_event(obj: Any) -> Event:
    """An event that entered inside another message (a batch's): checked as ``decode_event``
    checks one that came on its own."""
    return _check(obj, _EVENT, "event")  # type: ignore[return-value]


def decode_command(data: bytes | str) -> Command:
    """The one place a command enters a worker (see ``decode_event``)."""
    return _decode(data, _COMMAND, "command")  # type: ignore[return-value]


def _fallback(value: Any) -> Any:
    return str(value)


def dumps(obj: Any) -> bytes:
    """Compact JSON (orjson: several times faster than the standard library on the hot path);
    values that JSON cannot hold become strings rather than crashing a service."""
    return orjson.dumps(obj, default=_fallback, option=orjson.OPT_NON_STR_KEYS)


def loads(data: bytes | str) -> Any:
    return orjson.loads(data)
