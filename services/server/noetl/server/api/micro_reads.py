"""The NATS service's reads and the keychain: what ``noetl events``, ``logs``, ``executions``,
``catalog show`` and ``credentials`` ask for when the CLI acts as a principal (``NOETL_TOKEN``).

Without these the CLI read the streams and buckets itself, so what it could see was whatever its
NATS user could see. A principal's NATS user reaches only ``noetl.api.>`` (docs/security.md#nats);
through these endpoints it reads what its role and namespaces allow, as over HTTP, and a
credential write or delete names the principal in the audit trail.

An answer must fit one NATS message (``max_payload``, 1 MiB by default): events come in pages of
at most ``PAGE_BYTES`` encoded bytes; ``last`` is the stream position to ask after next, and
``more`` says whether the stored events go on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from nats.micro.request import Request

from noetl.dsl.errors import (
    ForbiddenError,
    KeychainUnresolvedError,
    NoSuchEntityError,
    RequestInvalidError,
    reply_error,
)
from noetl.events import subjects as s
from noetl.events.batches import events_of
from noetl.events.masking import weak_refusal
from noetl.events.objects import expand
from noetl.events.port import Bus
from noetl.server.api.queries import execution_logs, list_executions
from noetl.store.audit import record_credential_access
from noetl.store.credentials import check_name, check_scope
from noetl.store.principals import Principal, namespace_of

EVENTS_SUBJECT = "noetl.api.events"
LOGS_SUBJECT = "noetl.api.logs"
EXECUTIONS_SUBJECT = "noetl.api.executions"
CATALOG_SHOW_SUBJECT = "noetl.api.catalog.show"
CREDENTIALS_SUBJECT = "noetl.api.credentials.{action}"
CREDENTIAL_ACTIONS = ("list", "set", "delete")
PAGE_BYTES = 512 * 1024  # half the default max_payload: room for the envelope and headers

Reply = Callable[[Request, dict[str, Any], int], Awaitable[None]]
Handler = Callable[[Request, Principal], Awaitable[None]]


class Service(Protocol):
    """What the reads need of ``NatsApiService``."""

    bus: Bus
    catalog: Any
    requests: Any

    async def _guard(self, req: Request, eid: str, principal: Principal, action: str) -> bool: ...


def request_object(req: Request) -> dict[str, Any] | None:
    """The request's JSON object; an empty request (``nats req subject ''``) or ``null`` is an
    empty one, so a list needs no body."""
    try:
        body = json.loads(req.data or b"{}")
    except ValueError:
        return None
    if body is None:
        return {}
    return body if isinstance(body, dict) else None


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default


def endpoints(svc: Service, reply: Reply) -> list[tuple[str, str, Handler]]:
    """(name, subject, handler) of each read endpoint, for ``NatsApiService.start``."""
    reads = _Reads(svc, reply)
    return [
        ("events", EVENTS_SUBJECT, reads.events),
        ("logs", LOGS_SUBJECT, reads.logs),
        ("executions", EXECUTIONS_SUBJECT, reads.executions),
        ("catalog_show", CATALOG_SHOW_SUBJECT, reads.catalog_show),
        *(
            (f"credentials_{a}", CREDENTIALS_SUBJECT.format(action=a), _credentials(svc, reply, a))
            for a in CREDENTIAL_ACTIONS
        ),
    ]


class _Reads:
    def __init__(self, svc: Service, reply: Reply) -> None:
        self.svc, self.reply = svc, reply

    async def bad(self, req: Request, what: str) -> None:
        await self.reply(req, reply_error(RequestInvalidError(what)), 400)

    async def events(self, req: Request, principal: Principal) -> None:
        """``{execution_id, after?}``: the execution's events after stream position ``after``."""
        body = request_object(req)
        eid = body.get("execution_id") if body else None
        if body is None or not isinstance(eid, str):
            await self.bad(req, 'send {"execution_id": "...", "after": <seq, optional>}')
            return
        if not await self.svc._guard(req, eid, principal, "read"):
            return
        after = _int(body.get("after"), 0)
        bus = self.svc.bus
        msgs = await bus.read(s.EVENTS_STREAM, [s.execution_events_filter(eid)], start_seq=after + 1)
        page: list[dict[str, Any]] = []
        size, last, more = 0, after, False
        for m in msgs:
            try:
                stored = events_of(m.data)
            except ValueError:
                last = m.seq  # not an event: skipped, as every reader skips it
                continue
            # a batch's events go on one page together: ``after`` counts stored messages
            evs: list[dict[str, Any]] = [dict(e) for e in stored]
            evs = [await expand(bus, e) if "payload_ref" in (e.get("payload") or {}) else e for e in evs]
            size += sum(len(json.dumps(ev, default=str)) for ev in evs)
            if page and size > PAGE_BYTES:
                more = True
                break
            page.extend(evs)
            last = m.seq
        await self.reply(req, {"events": page, "last": last, "more": more}, 200)

    async def logs(self, req: Request, principal: Principal) -> None:
        """``{execution_id, step?}``: what each task run printed or logged."""
        body = request_object(req)
        eid = body.get("execution_id") if body else None
        step = body.get("step") if body else None
        if body is None or not isinstance(eid, str) or not (step is None or isinstance(step, str)):
            await self.bad(req, 'send {"execution_id": "...", "step": "<optional>"}')
            return
        if not await self.svc._guard(req, eid, principal, "read"):
            return
        out = await execution_logs(self.svc.bus, eid, step)
        if out is None:
            await self.reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return
        await self.reply(req, {"logs": out}, 200)

    async def executions(self, req: Request, principal: Principal) -> None:
        """``{status?, path?, limit?, before?}``: the executions of namespaces the caller may read."""
        body = request_object(req)
        if body is None:
            await self.bad(req, "send a JSON object")
            return
        status, path, before = body.get("status"), body.get("path"), body.get("before")
        if not all(v is None or isinstance(v, str) for v in (status, path)):
            await self.bad(req, "`status` and `path` are strings")
            return
        out = await list_executions(
            self.svc.bus, status=status, path=path, limit=_int(body.get("limit"), 100),
            before=before if isinstance(before, int) else None,
            visible=lambda namespace: principal.may("read", namespace),
        )
        await self.reply(req, out, 200)

    async def catalog_show(self, req: Request, principal: Principal) -> None:
        """``{path, version?}``: a registered playbook's text, for a reader of its namespace."""
        body = request_object(req)
        path = body.get("path") if body else None
        version = body.get("version") if body else None
        if not isinstance(path, str) or not (version is None or isinstance(version, str)):
            await self.bad(req, 'send {"path": "...", "version": "<optional>"}')
            return
        catalog = self.svc.catalog
        visible = principal.may("read", namespace_of(path))
        text = await catalog.get(path, version) if visible and catalog is not None else None
        if text is None:  # another namespace's is as absent as a missing one
            which = f"{path!r}{' version ' + version if version else ''}"
            await self.reply(req, reply_error(NoSuchEntityError(f"no playbook {which}")), 404)
            return
        await self.reply(req, {"path": path, "version": version, "playbook": text}, 200)


def _credentials(svc: Service, reply: Reply, action: str) -> Handler:
    """``noetl.api.credentials.list`` ({}): names and kinds; ``.set`` ({name, kind?, data, scope?})
    and ``.delete`` ({name}): an admin's, each audited with the principal before it happens (a
    denied attempt too), as ``/api/credentials`` does."""

    async def handler(req: Request, principal: Principal) -> None:
        store = getattr(svc.requests, "credentials", None)
        if store is None:
            await reply(req, reply_error(KeychainUnresolvedError("this server has no credential store")), 503)
            return
        if action == "list":
            await reply(req, {"credentials": await store.list()}, 200)
            return
        body = request_object(req) or {}
        name = body.get("name")
        try:
            check_name(name)  # type: ignore[arg-type]
        except (ValueError, TypeError) as e:
            await reply(req, reply_error(RequestInvalidError(str(e))), 400)
            return

        async def audit(outcome: str, kind: str | None = None) -> None:
            await record_credential_access(
                svc.bus, action=f"credential.{'put' if action == 'set' else 'delete'}", credential=str(name),
                who=principal.name, outcome=outcome, kind=kind, remote="nats",
            )

        if principal.role != "admin":
            await audit("denied")
            who = f"principal {principal.name!r} ({principal.role})"
            err = ForbiddenError(f"{who} may not manage credentials: an admin's")
            await reply(req, reply_error(err), 403)
            return
        if action == "delete":
            if not await store.exists(name):
                await reply(req, reply_error(NoSuchEntityError(f"no credential {name!r}")), 404)
                return
            await audit("deleted")
            await store.delete(name)
            await reply(req, {"name": name, "deleted": True}, 200)
            return
        await _set(store, body, reply, req, audit)

    return handler


async def _set(store: Any, body: dict[str, Any], reply: Reply, req: Request,
               audit: Callable[[str, str | None], Awaitable[None]]) -> None:
    name, kind, data = body["name"], body.get("kind") or "secret", body.get("data")
    if not isinstance(kind, str) or not isinstance(data, dict):
        await reply(req, reply_error(RequestInvalidError('send {"name", "kind", "data": {...}}')), 400)
        return
    try:
        scope = check_scope(body.get("scope"))
    except ValueError as e:
        await reply(req, reply_error(RequestInvalidError(str(e))), 400)
        return
    refusal = weak_refusal(name, data, kind, " (or allow_weak)")
    if refusal and body.get("allow_weak") is not True:
        await reply(req, reply_error(RequestInvalidError(refusal)), 400)
        return
    await audit("stored", kind)
    try:
        await store.put(name, kind, data, scope)
    except KeychainUnresolvedError as e:
        await reply(req, reply_error(e), 503)
        return
    await reply(req, {"name": name, "kind": kind, "scope": scope, "stored": True}, 200)
