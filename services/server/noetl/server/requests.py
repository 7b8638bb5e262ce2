"""Turning an execution request into its ``playbook.execution.requested`` event.

This is the adapter half of the request: everything that needs I/O (the catalog, the keychain
store, validation errors to report) happens here, so the engine receives a self-contained event:
the playbook text, the payload and the list of keychain entries that did not resolve.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from noetl.dsl.cache import digest_of, parse_playbook
from noetl.dsl.errors import (
    CredentialScopeError,
    ExecutionFinishedError,
    ForbiddenError,
    NoSuchEntityError,
    PlaybookInvalidError,
    RequestInvalidError,
    reply_error,
)
from noetl.dsl.names import (
    execution_id_problem,
    request_id_problem,
    schedule_name_problem,
    signal_name_problem,
)
from noetl.engine.endings import ending
from noetl.events import subjects as s
from noetl.events import tracing
from noetl.events import vocabulary as vocab
from noetl.events.clock import utc_now
from noetl.events.envelope import (
    EntityType,
    EventName,
    Status,
    WireError,
    decode_event,
    dumps,
    loads,
    make_event,
)
from noetl.events.ids import derive_id, execution_id_for
from noetl.events.nats_port import as_bus
from noetl.events.port import store_all
from noetl.store.catalog import MAX_MESSAGE_BYTES, Catalog
from noetl.store.credentials import scope_allows
from noetl.store.principals import Principal, namespace_of

log = logging.getLogger("noetl.server")

# below NATS's own 1 MiB message limit, so the limit is ours to report, with a reason
MAX_REQUEST_BYTES = 512 * 1024
# signals one execution may receive: each one waits in its queue until a step takes it, and the
# queue lives in the engine's state, so an unbounded stream of them grows every snapshot
MAX_SIGNALS = 10_000
# far deeper than any real input; deep enough nesting exhausts Python's recursion in every walk
MAX_PAYLOAD_DEPTH = 64


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


class RequestHandler:
    def __init__(self, bus: Any, catalog: Catalog, credentials: Any, partitions: int = 1) -> None:
        self.bus = as_bus(bus)
        self.catalog = catalog
        self.credentials = credentials
        self.partitions = partitions

    async def handle(
        self,
        data: bytes,
        msg_id: str | None = None,
        *,
        principal: Principal | None = None,
        scheduled: bool = False,
        forked: bool = False,
    ) -> dict[str, Any]:
        """Validate and record one request. Returns ``{execution_id}`` or ``{error, problems}``.

        ``principal``: the caller, for a request from the HTTP API, the NATS service or the
        console. Such a request may not set the fields only the server and workers set
        (``schedule``, ``parent_*``, ``execution_id``, a ``schedule.*`` request id; ``fork`` unless
        ``forked``: a rerun the server prepared, ``noetl.server.rerun``), and is refused
        (``forbidden``, nothing recorded) unless the principal may write the playbook's namespace.
        Without one the request came over ``noetl.requests.execute``, whose publishers NATS's
        permissions vouch for (workers starting children); even there a schedule's fields are the
        scheduler's alone (``scheduled``, in this process).
        """
        began = time.time_ns() if tracing.enabled() else 0
        try:
            req = self._parse(data)
        except RequestInvalidError as e:
            log.warning("request rejected: %s", e.message)
            known = self._known_id(data, msg_id)
            if known is None:
                return {"error": e.to_dict()}
            execution_id = execution_id_for(known)
            await self._reject(execution_id, s.partition_of(execution_id, self.partitions), e.to_dict(), {})
            return {"execution_id": execution_id, "error": e.to_dict()}
        try:
            self._check_reserved(req, msg_id, principal, scheduled, forked)
        except RequestInvalidError as e:  # recorded nowhere: its id may be a schedule's next fire
            log.warning("request refused: %s", e.message)
            return {"error": e.to_dict()}
        request_id = str(
            req.get("request_id") or msg_id or derive_id("request", data.decode(errors="replace"))
        )
        execution_id = str(req.get("execution_id") or execution_id_for(request_id))
        partition = s.partition_of(execution_id, self.partitions)
        if await self._already_requested(execution_id):
            return {"execution_id": execution_id}  # the same answer a retry of the first got
        if principal is not None and not req.get("playbook") and (
            forbidden := self._forbidden(principal, namespace_of(str(req["path"])), execution_id)
        ):
            return forbidden  # before the catalog is read: another namespace's paths are not probed
        try:
            text, file = await self._playbook_text(req)
            playbook = parse_playbook(text, file)  # validated once per distinct text
        except PlaybookInvalidError as e:
            await self._reject(execution_id, partition, e.to_dict(), req)
            return {"execution_id": execution_id, "error": e.to_dict()}
        except RequestInvalidError as e:
            await self._reject(execution_id, partition, e.to_dict(), req)
            return {"execution_id": execution_id, "error": e.to_dict()}
        digest = digest_of(text)
        origin = None if req.get("playbook") else str(req["path"])  # what the request can prove
        claimed = playbook.metadata.path or playbook.metadata.name  # an inline playbook's own word
        namespace = namespace_of(origin if origin is not None else claimed)
        if principal is not None and (forbidden := self._forbidden(principal, namespace, execution_id)):
            return forbidden
        if principal is None and req.get("parent_execution_id"):
            # a child (the `playbook` tool) acts for whoever started its parent: an inline playbook of
            # team_b may not drive team_a's credentialed playbook with its own inputs
            principal = await self._principal_of(str(req["parent_execution_id"]))
            if principal is not None and not principal.may("write", namespace):
                denied = ForbiddenError(
                    f"principal {principal.name!r} ({principal.role}), who started parent execution "
                    f"{req['parent_execution_id']}, may not start playbooks in namespace {namespace!r}"
                )
                await self._reject(execution_id, partition, denied.to_dict(), req)  # the parent waits for it
                return {"execution_id": execution_id, "error": denied.to_dict()}
        missing: list[str] = []
        refused: list[str] = []
        mismatched: list[dict[str, Any]] = []
        for entry in playbook.keychain:
            scope = await self.credentials.scope(entry.name) if self.credentials is not None else None
            if scope is None:
                missing.append(entry.name)
            elif not scope_allows(scope, origin, digest):
                refused.append(entry.name)
            elif self.credentials is not None:
                stored = await self.credentials.kind(entry.name)
                if stored != entry.kind:  # the declared kind decides masking: no start on a guess
                    mismatched.append({"name": entry.name, "declared": entry.kind, "stored": stored})
        if refused:
            where = "an inline playbook" if origin is None else f"catalog path {origin!r}"
            names = ", ".join(refused)
            err = CredentialScopeError(
                f"credential{'s' if len(refused) > 1 else ''} {names} may not be used by {where}: "
                "its scope does not include it. Register the playbook under a path in the credential's scope "
                "(noetl catalog register) and request it by path, or have an admin widen the scope "
                "(noetl credentials set NAME --scope PATH [--allow-inline])",
                entries=refused,
            )
            await self._reject(execution_id, partition, err.to_dict(), req)
            return {"execution_id": execution_id, "error": err.to_dict()}
        await self.catalog.put_digest(digest, text)
        event = make_event(
            event_id=derive_id("requested", execution_id),
            execution_id=execution_id,
            timestamp=utc_now(),
            source="server",
            name="playbook.execution.requested",
            entity_type="playbook",
            # a catalog playbook without metadata.path is registered under its name: keep the
            # path it was requested by, so lists and the console link it to its catalog entry
            entity_id=playbook.metadata.path or origin or playbook.metadata.name,
            status="in_progress",
            payload={
                "playbook": text,
                "file": file,
                "digest": digest,
                "path": playbook.metadata.path or origin,
                "version": playbook.metadata.version,
                "payload": req.get("payload") or {},
                "keychain_missing": missing,
                **({"keychain_mismatch": mismatched} if mismatched else {}),
                "partition": partition,
                "request_id": request_id,
                "namespace": namespace,
                **({"principal": principal.grant()} if principal is not None else {}),
                **({"schedule": req["schedule"]} if req.get("schedule") else {}),
                **({"parent_iter": req["parent_iter"]} if req.get("parent_iter") is not None else {}),
                **({"fork": req["fork"]} if req.get("fork") is not None else {}),
            },
            parent_execution_id=req.get("parent_execution_id"),
            trace_id=req.get("trace_id") or execution_id,
        )
        data = dumps(event)
        if len(data) > MAX_MESSAGE_BYTES:  # the text is in the catalog by digest: name it only
            del event["payload"]["playbook"]
            data = dumps(event)
        try:
            decode_event(data)  # what the partition reader will check: accept nothing it would ignore
        except WireError as e:
            invalid = RequestInvalidError(f"request cannot be recorded: {e}")
            await self._reject(execution_id, partition, invalid.to_dict(), req)
            return {"execution_id": execution_id, "error": invalid.to_dict()}
        subject = s.event_subject(partition, execution_id, event["name"])
        await store_all(self.bus, [(subject, data, event["event_id"])])
        if began:
            trace = str(event.get("trace_id") or execution_id)
            tracing.record(
                "request",
                trace,
                span_id=tracing.span_int(trace, "request", execution_id),
                parent=tracing.root_span(trace, execution_id),
                start=began,
                end=time.time_ns(),
                attributes={"execution_id": execution_id, "request_id": request_id, "path": origin or ""},
            )
        return {"execution_id": execution_id}

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

    async def cancel(self, data: bytes) -> dict[str, Any]:
        """Record a cancel request as an engine input; the engine decides what it stops."""
        try:
            req = loads(data)
            execution_id = req["execution_id"]
        except (ValueError, KeyError, TypeError):
            log.warning('cancel request ignored: it needs {"execution_id": ...}')
            return reply_error(RequestInvalidError("cancel needs execution_id"))
        if problem := execution_id_problem(execution_id):
            log.warning("cancel request ignored: %s", problem)
            return reply_error(RequestInvalidError(f"cancel: {problem}"))
        # the execution's own partition, whatever the count was when it started
        partition = await self._partition_of_recorded(execution_id)
        if partition is None:  # a cancel must not make a phantom execution appear
            log.warning("cancel request ignored: no execution %s", execution_id)
            return reply_error(NoSuchEntityError(f"no execution {execution_id}"))
        event = make_event(
            event_id=derive_id("cancel", execution_id),
            execution_id=execution_id,
            timestamp=utc_now(),
            source="server",
            name="execution.cancel.requested",
            entity_type="workflow",
            entity_id=execution_id,
            status="in_progress",
            payload={
                "reason": str(req.get("reason") or "cancelled by request"),
                "principal": _principal_name(req),
            },
        )
        subject = s.event_subject(partition, execution_id, event["name"])
        await store_all(self.bus, [(subject, dumps(event), event["event_id"])])
        return {"execution_id": execution_id, "cancel": "requested"}

    async def outside(self, subject: str, data: bytes, msg_id: str | None = None) -> dict[str, Any]:
        """Record a signal, pause or resume (SEMANTICS §17) as an engine input of its execution.
        The body is ``{execution_id, request_id, signal?, data?, reason?}``; ``request_id`` (or the
        message id) names this one request, so a repeated publish is recorded once."""
        what = subject.rsplit(".", 1)[-1]
        try:
            req = loads(data)
            execution_id = req["execution_id"]
        except (ValueError, KeyError, TypeError):
            return reply_error(RequestInvalidError(f'{what} needs {{"execution_id": ...}}'))
        if problem := execution_id_problem(execution_id):
            return reply_error(RequestInvalidError(f"{what}: {problem}"))
        request_id = str(req.get("request_id") or msg_id or derive_id(what, data.decode(errors="replace")))
        if problem := request_id_problem(request_id):
            return reply_error(RequestInvalidError(f"{what}: {problem}"))
        payload: dict[str, Any] = {"request_id": request_id, "principal": _principal_name(req)}
        if what == "signal":
            if problem := signal_name_problem(req.get("signal")):
                return reply_error(RequestInvalidError(problem))
            payload.update(signal=req["signal"], data=req.get("data"))
        elif req.get("reason") is not None:
            payload["reason"] = str(req["reason"])[:500]
        partition = await self._partition_of_recorded(execution_id)
        if partition is None:
            log.warning("%s ignored: no execution %s", what, execution_id)
            return reply_error(NoSuchEntityError(f"no execution {execution_id}"))
        if await self._finished(execution_id):
            return reply_error(
                ExecutionFinishedError(f"execution {execution_id} has finished: there is nothing to {what}")
            )
        if what == "signal":
            received = s.execution_event_filter(execution_id, vocab.SIGNAL_RECEIVED)
            if len(await self.bus.read(s.EVENTS_STREAM, [received])) >= MAX_SIGNALS:
                return reply_error(RequestInvalidError(
                    f"execution {execution_id} has received {MAX_SIGNALS} signals, the most one execution "
                    "takes: its queue would grow without bound"
                ))
        names: dict[str, EventName] = {"signal": vocab.SIGNAL_RECEIVED, "pause": vocab.PAUSE_REQUESTED}
        name = names.get(what, vocab.RESUME_REQUESTED)
        event = make_event(
            event_id=derive_id(what, execution_id, request_id),
            execution_id=execution_id,
            timestamp=utc_now(),
            source="server",
            name=name,
            entity_type="workflow",
            entity_id=execution_id,
            status="in_progress",
            payload=payload,
        )
        subject = s.event_subject(partition, execution_id, name)
        await store_all(self.bus, [(subject, dumps(event), event["event_id"])])
        return {"execution_id": execution_id, what: "recorded", "request_id": request_id}

    async def _finished(self, execution_id: str) -> bool:
        finished = s.execution_event_filter(execution_id, "workflow.finished")
        return await self.bus.last(s.EVENTS_STREAM, finished) is not None

    async def reject_unrecordable(self, data: bytes, msg_id: str | None, cause: BaseException) -> None:
        """A request that failed for no reason of NATS's (a bug, input nothing foresaw) ends in
        ``workflow.finished`` all the same when its sender gave an id, rather than vanishing."""
        known = self._known_id(data, msg_id)
        if known is None or request_id_problem(known):
            return
        execution_id = execution_id_for(known)
        err = RequestInvalidError(
            f"the server could not record this request ({type(cause).__name__}: {str(cause)[:200]}); "
            "check the request against docs/nats-contract.md and report the message if it is valid"
        )
        await self._reject(execution_id, s.partition_of(execution_id, self.partitions), err.to_dict(), {})

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
        unknown = set(req) - {
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
        if unknown:
            raise RequestInvalidError(f"unknown request fields: {', '.join(sorted(unknown))}")
        if not req.get("path") and not req.get("playbook"):
            raise RequestInvalidError("request needs `path` (a catalog playbook) or `playbook` (inline YAML)")
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
