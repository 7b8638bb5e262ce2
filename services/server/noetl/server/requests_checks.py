"""A request's checks before anything is recorded: parsing within the limits, the fields only the
server sets, the principal's namespace, the playbook's text (inline or from the catalog), and the
rejection an invalid request still gets recorded as. The base of ``RequestHandler``.
"""

from __future__ import annotations

import logging
from typing import Any

from noetl.dsl.errors import (
    ForbiddenError,
    RequestInvalidError,
)
from noetl.dsl.names import (
    execution_id_problem,
    request_id_problem,
    schedule_name_problem,
)
from noetl.engine.endings import ending
from noetl.events import subjects as s
from noetl.events import vocabulary as vocab
from noetl.events.clock import utc_now
from noetl.events.envelope import (
    EntityType,
    EventName,
    Status,
    dumps,
    loads,
    make_event,
)
from noetl.events.ids import derive_id
from noetl.events.port import Bus, store_all
from noetl.store.catalog import Catalog
from noetl.store.principals import Principal, namespace_of

log = logging.getLogger("noetl.server")

# below NATS's own 1 MiB message limit, so the limit is ours to report, with a reason
MAX_REQUEST_BYTES = 512 * 1024
# signals one execution may receive: each one waits in its queue until a step takes it, and the
# queue lives in the engine's state, so an unbounded stream of them grows every snapshot
MAX_SIGNALS = 10_000
# far deeper than any real input; deep enough nesting exhausts Python's recursion in every walk
MAX_PAYLOAD_DEPTH = 64
# what a request may carry; anything else is refused by name rather than ignored
REQUEST_FIELDS = frozenset(
    {
        "request_id",
        "execution_id",
        "path",
        "version",
        "playbook",
        "payload",
        "parent_execution_id",
        "parent_iter",
        "trace_id",
        "schedule",
        "fork",
    }
)


def _depth(value: Any, limit: int = MAX_PAYLOAD_DEPTH + 1) -> int:
    """Nesting depth of JSON ``value``, counted without recursion and only up to ``limit``."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list) and d <= limit:
            deepest = max(deepest, d)
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    return deepest


def _principal_name(req: dict[str, Any]) -> str:
    """Who sent a cancel, signal, pause or resume: the principal the API or NATS service vouched
    for, else ``nats`` (a client of ``noetl.requests.*`` itself, whom NATS's permissions admit)."""
    name = req.get("principal")
    return name[:100] if isinstance(name, str) and name else "nats"


class RequestChecks:
    """Checks and lookups of ``RequestHandler`` (``noetl.server.requests``), which sets these."""

    bus: Bus
    catalog: Catalog
    credentials: Any
    partitions: int

    @staticmethod
    def _forbidden(principal: Principal, namespace: str, execution_id: str) -> dict[str, Any] | None:
        """The refusal of a request in a namespace the principal may not write; nothing is
        recorded for it (the namespace is not the caller's to fill with failed executions)."""
        if principal.may("write", namespace):
            return None
        err = ForbiddenError(
            f"principal {principal.name!r} ({principal.role}) may not start executions "
            f"in namespace {namespace!r}"
        )
        log.warning("request for %s refused: %s", execution_id, err.message)
        return {"error": err.to_dict()}

    @staticmethod
    def _check_reserved(
        req: dict[str, Any], msg_id: str | None, principal: Principal | None, scheduled: bool, forked: bool
    ) -> None:
        """The fields whose value is the server's or a worker's word, refused from anyone else:
        a ``schedule.<name>.<due>`` request id would squat a schedule's next fire, and ``schedule``
        or ``parent_*`` would list an execution under a schedule or a parent it has nothing to do
        with."""
        if scheduled:
            return
        request_id = str(req.get("request_id") or msg_id or "")
        if request_id.startswith("schedule.") or req.get("schedule") is not None:
            raise RequestInvalidError(
                "request ids `schedule.*` and the field `schedule` are the scheduler's: leave them out"
            )
        if principal is not None:
            reserved = ("parent_execution_id", "parent_iter", "execution_id") + (() if forked else ("fork",))
            # `fork` names the execution it continues and carries its ctx: only a rerun the server
            # prepared after checking the caller against that execution sets it
            taken = sorted(k for k in reserved if k in req)
            if taken:
                raise RequestInvalidError(
                    f"request {'fields' if len(taken) > 1 else 'field'} {', '.join(taken)}: set by the "
                    "server and workers only; leave it out"
                )

    async def _principal_of(self, execution_id: str) -> Principal | None:
        """The principal recorded with an execution's request (None: it was requested without)."""
        subject = s.execution_event_filter(execution_id, "playbook.execution.requested")
        msg = await self.bus.last(s.EVENTS_STREAM, subject)
        if msg is None:
            return None
        return Principal.from_grant((loads(msg.data).get("payload") or {}).get("principal"))

    async def _already_requested(self, execution_id: str) -> bool:
        """The same request id runs once, also after JetStream's duplicate window has passed."""
        return await self._partition_of_recorded(execution_id) is not None

    async def _partition_of_recorded(self, execution_id: str) -> int | None:
        """The partition an execution was recorded in (its request event's subject), or None."""
        subject = s.execution_event_filter(execution_id, "playbook.execution.requested")
        msg = await self.bus.last(s.EVENTS_STREAM, subject)
        return s.parse_event_subject(msg.subject)[0] if msg is not None and msg.subject else None

    @staticmethod
    def _known_id(data: bytes, msg_id: str | None) -> str | None:
        """The request id of a rejected request, when the sender gave one: it may be waiting."""
        if len(data) <= MAX_REQUEST_BYTES:
            try:
                req = loads(data)
                if isinstance(req, dict) and isinstance(rid := req.get("request_id"), str):
                    return rid
            except ValueError:
                pass
        return msg_id

    def _parse(self, data: bytes) -> dict[str, Any]:
        if len(data) > MAX_REQUEST_BYTES:
            raise RequestInvalidError(
                f"request is {len(data)} bytes; the limit is {MAX_REQUEST_BYTES}: register a large "
                "playbook with `noetl catalog register FILE` and request it by `path`, and pass large "
                "inputs by reference (a table, a file, an object) rather than in `payload`"
            )
        try:
            req = loads(data)
        except ValueError as e:
            raise RequestInvalidError(
                f'request is not JSON: {e}; send {{"path": ..., "payload": {{...}}}}'
            ) from e
        if not isinstance(req, dict):
            raise RequestInvalidError("request must be a JSON object with path or playbook, and payload")
        if unknown := set(req) - REQUEST_FIELDS:
            raise RequestInvalidError(f"unknown request fields: {', '.join(sorted(unknown))}")
        if not req.get("path") and not req.get("playbook"):
            raise RequestInvalidError("request needs `path` (a catalog playbook) or `playbook` (inline YAML)")
        _check_values(req)
        return req

    async def _playbook_text(self, req: dict[str, Any]) -> tuple[str, str]:
        if req.get("playbook"):
            if not isinstance(req["playbook"], str):
                raise RequestInvalidError("request `playbook` must be the playbook's YAML text")
            return req["playbook"], "<request>"
        path, version = str(req["path"]), req.get("version")
        text = await self.catalog.get(path, version)
        if text is None:
            raise RequestInvalidError(
                f"no playbook {path!r}{' version ' + str(version) if version else ''} in the catalog; "
                "register it with `noetl catalog register FILE`"
            )
        return text, f"catalog:{path}"

    async def _reject(
        self, execution_id: str, partition: int, error: dict[str, Any], req: dict[str, Any]
    ) -> None:
        """A rejected request still ends in ``workflow.finished``, so a waiting client learns why."""
        log.warning("request for %s rejected: %s", execution_id, error.get("message"))
        msgs = []
        # the namespace of what was asked for, so its readers (and only they) can see why it failed
        where = {"namespace": namespace_of(str(req["path"]))} if isinstance(req.get("path"), str) else {}
        closing: list[tuple[EventName, EntityType, Status, dict[str, Any]]] = [
            (vocab.REQUEST_EVALUATED, "playbook", "error", {"error": error, **where})
        ]
        for name, entity_type, status, payload in closing + ending("failed", error=error):
            ev = make_event(
                event_id=derive_id("rejected", execution_id, name),
                execution_id=execution_id,
                timestamp=utc_now(),
                source="server",
                name=name,
                entity_type=entity_type,
                entity_id=execution_id,
                status=status,
                payload=payload,
                parent_execution_id=req.get("parent_execution_id"),
            )
            msgs.append((s.event_subject(partition, execution_id, name), dumps(ev), ev["event_id"]))
        await store_all(self.bus, msgs)


def _check_values(req: dict[str, Any]) -> None:
    """Each field's value, so that nothing a request carries can stop the engine later: an event it
    would refuse where the server reads its inputs is refused here, with the reason."""
    if req.get("payload") is not None and not isinstance(req["payload"], dict):
        raise RequestInvalidError("request `payload` must be a JSON object")
    if req.get("parent_iter") is not None and not isinstance(req["parent_iter"], dict):
        raise RequestInvalidError(
            "request `parent_iter` must be a JSON object: the calling loop iteration's `iter` "
            "(the `playbook` tool sets it; leave it out otherwise)"
        )
    fork = req.get("fork")
    if fork is not None and (
        not isinstance(fork, dict)
        or execution_id_problem(fork.get("from_execution_id"))
        or not isinstance(fork.get("runs"), list)
    ):
        # written by a rerun (noetl.server.rerun), never by hand
        raise RequestInvalidError(
            "request `fork` must be {from_execution_id, runs, ctx} as `noetl rerun` writes it: "
            "use noetl rerun ID or POST /api/executions/{id}/rerun"
        )
    for key, problem in (
        ("request_id", request_id_problem),
        ("execution_id", execution_id_problem),
        ("parent_execution_id", execution_id_problem),
        ("schedule", schedule_name_problem),
    ):
        if req.get(key) is not None and (msg := problem(req[key])):
            raise RequestInvalidError(f"request `{key}`: {msg}")
    trace = req.get("trace_id")
    if trace is not None and (not isinstance(trace, str) or not 0 < len(trace) <= 128):
        # an event whose trace id is not a string is refused where the server reads its inputs:
        # accepted here, the execution would never have been decided
        raise RequestInvalidError("request `trace_id` must be a string of 1 to 128 characters")
    if req.get("path") is not None and not isinstance(req["path"], str):
        raise RequestInvalidError("request `path` must be a string (a catalog path, e.g. examples/hello)")
    if req.get("version") is not None and (
        isinstance(req["version"], bool) or not isinstance(req["version"], str | int)
    ):
        raise RequestInvalidError("request `version` must be a string or a whole number")
    if _depth(req.get("payload")) > MAX_PAYLOAD_DEPTH:
        raise RequestInvalidError(
            f"request `payload` nests deeper than {MAX_PAYLOAD_DEPTH} levels; flatten it or pass the "
            "data by reference (a table, a file, an object)"
        )
