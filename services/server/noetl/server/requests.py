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
    ForbiddenError,
    PlaybookInvalidError,
    RequestInvalidError,
)
from noetl.events import subjects as s
from noetl.events import tracing
from noetl.events.clock import utc_now
from noetl.events.envelope import (
    Event,
    WireError,
    decode_event,
    dumps,
    make_event,
)
from noetl.events.ids import derive_id, execution_id_for
from noetl.events.port import Bus, store_all
from noetl.server.requests_checks import MAX_PAYLOAD_DEPTH, MAX_REQUEST_BYTES, MAX_SIGNALS
from noetl.server.requests_outside import OutsideRequests
from noetl.store.catalog import MAX_MESSAGE_BYTES, Catalog
from noetl.store.credentials import scope_allows, scope_input_problems
from noetl.store.principals import Principal, namespace_of

log = logging.getLogger("noetl.server")

__all__ = ["MAX_PAYLOAD_DEPTH", "MAX_REQUEST_BYTES", "MAX_SIGNALS", "RequestHandler"]


class RequestHandler(OutsideRequests):
    """``handle`` runs the checks in one fixed order (parse, reserved fields, duplicate, namespace
    before the catalog is read, playbook, keychain scope, wire check), and each may end the request
    with its own answer; the checks themselves are in ``noetl.server.requests_checks``."""

    def __init__(self, bus: Bus, catalog: Catalog, credentials: Any, partitions: int = 1) -> None:
        self.bus = bus
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
        req, answer = await self._parsed(data, msg_id, principal, scheduled, forked)
        if req is None:
            return answer
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
        except (PlaybookInvalidError, RequestInvalidError) as e:
            return await self._refused(execution_id, partition, e.to_dict(), req)
        origin = None if req.get("playbook") else str(req["path"])  # what the request can prove
        claimed = playbook.metadata.path or playbook.metadata.name  # an inline playbook's own word
        namespace = namespace_of(origin if origin is not None else claimed)
        if principal is not None and (forbidden := self._forbidden(principal, namespace, execution_id)):
            return forbidden
        if principal is None and req.get("parent_execution_id"):
            # a child (the `playbook` tool) acts for whoever started its parent
            principal = await self._principal_of(str(req["parent_execution_id"]))
            if (denied := self._parent_denied(principal, namespace, req)) is not None:
                return await self._refused(execution_id, partition, denied, req)  # the parent waits for it
        digest = digest_of(text)
        keys = await self._keychain(playbook, origin, digest, req.get("payload"))
        if "error" in keys:
            return await self._refused(execution_id, partition, keys["error"], req)
        await self.catalog.put_digest(digest, text)
        meta = {"partition": partition, "request_id": request_id, "namespace": namespace}
        source = (text, file, digest, origin)
        event = _requested_event(execution_id, req, playbook, source, keys, meta, principal)
        return await self._record(event, req, partition, began, origin)

    async def _parsed(
        self, data: bytes, msg_id: str | None, principal: Principal | None, scheduled: bool, forked: bool
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """(the request, {}), or (None, the answer). One that does not parse is recorded as
        rejected when its id can still be told, so the caller waiting on that execution hears why;
        one setting fields reserved to others is recorded nowhere: its id may be a schedule's next
        fire."""
        try:
            req = self._parse(data)
        except RequestInvalidError as e:
            log.warning("request rejected: %s", e.message)
            known = self._known_id(data, msg_id)
            if known is None:
                return None, {"error": e.to_dict()}
            execution_id = execution_id_for(known)
            await self._reject(execution_id, s.partition_of(execution_id, self.partitions), e.to_dict(), {})
            return None, {"execution_id": execution_id, "error": e.to_dict()}
        try:
            self._check_reserved(req, msg_id, principal, scheduled, forked)
        except RequestInvalidError as e:
            log.warning("request refused: %s", e.message)
            return None, {"error": e.to_dict()}
        return req, {}

    async def _refused(
        self, execution_id: str, partition: int, error: dict[str, Any], req: dict[str, Any]
    ) -> dict[str, Any]:
        """Recorded as rejected, so whoever waits on the execution (a parent, a CLI) hears why."""
        await self._reject(execution_id, partition, error, req)
        return {"execution_id": execution_id, "error": error}

    @staticmethod
    def _parent_denied(
        principal: Principal | None, namespace: str, req: dict[str, Any]
    ) -> dict[str, Any] | None:
        """A child acts for whoever started its parent: an inline playbook of team_b may not drive
        team_a's credentialed playbook with its own inputs."""
        if principal is None or principal.may("write", namespace):
            return None
        return ForbiddenError(
            f"principal {principal.name!r} ({principal.role}), who started parent execution "
            f"{req['parent_execution_id']}, may not start playbooks in namespace {namespace!r}"
        ).to_dict()

    async def _keychain(
        self, playbook: Any, origin: str | None, digest: str, payload: Any
    ) -> dict[str, Any]:
        """``{missing, mismatched}`` of the playbook's keychain, or ``{error}`` when an entry's
        scope does not include this playbook, or does not admit the request's inputs
        (``payload``): a credential must not reach a text it was not granted to, nor go where a
        caller's input sends it, so nothing starts then."""
        missing: list[str] = []
        refused: list[str] = []
        mismatched: list[dict[str, Any]] = []
        inputs_refused: list[tuple[str, str, str]] = []  # (credential, input, why)
        for entry in playbook.keychain:
            scope = await self.credentials.scope(entry.name) if self.credentials is not None else None
            if scope is None:
                missing.append(entry.name)
            elif not scope_allows(scope, origin, digest):
                refused.append(entry.name)
            elif problems := scope_input_problems(scope, payload if isinstance(payload, dict) else None):
                inputs_refused += [(entry.name, name, why) for name, why in problems]
            elif self.credentials is not None:
                stored = await self.credentials.kind(entry.name)
                if stored != entry.kind:  # the declared kind decides masking: no start on a guess
                    mismatched.append({"name": entry.name, "declared": entry.kind, "stored": stored})
        if not refused:
            if inputs_refused:
                return {"error": _inputs_refused(inputs_refused, origin).to_dict()}
            return {"missing": missing, "mismatched": mismatched}
        where = "an inline playbook" if origin is None else f"catalog path {origin!r}"
        names = ", ".join(refused)
        return {
            "error": CredentialScopeError(
                f"credential{'s' if len(refused) > 1 else ''} {names} may not be used by {where}: "
                "its scope does not include it. Register the playbook under a path in the credential's scope "
                "(noetl catalog register) and request it by path, or have an admin widen the scope "
                "(noetl credentials set NAME --scope PATH [--allow-inline])",
                entries=refused,
            ).to_dict()
        }

    async def _record(
        self, event: Event, req: dict[str, Any], partition: int, began: int, origin: str | None
    ) -> dict[str, Any]:
        """Store the event, after the check the partition reader will make: a request it would
        ignore must be refused here, where the caller still hears of it."""
        execution_id = str(event["execution_id"])
        data = dumps(event)
        if len(data) > MAX_MESSAGE_BYTES:  # the text is in the catalog by digest: name it only
            del event["payload"]["playbook"]
            data = dumps(event)
        try:
            decode_event(data)
        except WireError as e:
            invalid = RequestInvalidError(f"request cannot be recorded: {e}")
            return await self._refused(execution_id, partition, invalid.to_dict(), req)
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
                attributes={
                    "execution_id": execution_id,
                    "request_id": event["payload"]["request_id"],
                    "path": origin or "",
                },
            )
        return {"execution_id": execution_id}




def _requested_event(
    execution_id: str,
    req: dict[str, Any],
    playbook: Any,
    source: tuple[str, str | None, str, str | None],
    keys: dict[str, Any],
    meta: dict[str, Any],
    principal: Principal | None,
) -> Event:
    """The ``playbook.execution.requested`` event: self-contained, so the engine folds it without
    reading the catalog or the keychain. ``source``: the playbook's text, file, digest and the
    catalog path it was requested by; ``meta``: its partition, request id and namespace."""
    text, file, digest, origin = source
    mismatch = {"keychain_mismatch": keys["mismatched"]} if keys["mismatched"] else {}
    optional = {
        "principal": principal.grant() if principal is not None else None,
        "schedule": req.get("schedule") or None,
        "parent_iter": req.get("parent_iter"),
        "fork": req.get("fork"),
    }
    return make_event(
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
            "keychain_missing": keys["missing"],
            **mismatch,
            "partition": meta["partition"],
            "request_id": meta["request_id"],
            "namespace": meta["namespace"],
            **{k: v for k, v in optional.items() if v is not None},
        },
        parent_execution_id=req.get("parent_execution_id"),
        trace_id=req.get("trace_id") or execution_id,
    )


def _inputs_refused(refused: list[tuple[str, str, str]], origin: str | None) -> CredentialScopeError:
    """The refusal of inputs a credential's scope does not admit: each input with the credential
    whose rule it broke and the rule, and the three ways on (never the value sent)."""
    where = "an inline playbook" if origin is None else f"catalog path {origin!r}"
    parts = [f"input {name!r} (credential {cred!r}: {why})" for cred, name, why in refused]
    creds = sorted({cred for cred, _, _ in refused})
    return CredentialScopeError(
        f"{where} uses credential{'s' if len(creds) > 1 else ''} {', '.join(creds)}, whose scope "
        f"constrains the inputs a run of it accepts: refused {'; '.join(parts)}. Leave the input out "
        "(the playbook's own workload value is used) or send a value the scope admits; to admit "
        "another, an admin changes the scope's inputs (noetl credentials set NAME --inputs JSON, or "
        '"scope": {"inputs": {...}} in POST /api/credentials)',
        entries=creds,
        inputs=sorted({name for _, name, _ in refused}),
    )
