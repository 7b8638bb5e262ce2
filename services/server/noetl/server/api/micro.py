"""The NATS service ``noetl`` (NATS Services API: ``nats micro ls`` lists it).

Request-reply for clients that speak NATS but want an answer now: ``noetl.api.execute`` (same
handling as ``POST /api/executions``), ``noetl.api.status``, ``noetl.api.cancel``, the outside
input of SEMANTICS §17: ``noetl.api.signal``, ``noetl.api.pause``, ``noetl.api.resume``, and the
schedules of §18: ``noetl.api.schedule.add|list|pause|resume|delete``. All replicas
join one queue group, so each request is answered once by whichever is free. These subjects are
outside every stream on purpose: JetStream would answer a request on a captured subject with
its publish ack. A failure is an error reply (``Nats-Service-Error`` / ``-Code`` headers, what
``nats req`` shows) whose body still holds the JSON ``{"error": ...}``.
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from nats.aio.client import Client as NATS
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from noetl.client.run import cancel as request_cancel
from noetl.client.run import pause as client_pause
from noetl.client.run import resume as client_resume
from noetl.client.run import signal as client_signal
from noetl.dsl.errors import (
    ForbiddenError,
    NoSuchEntityError,
    RequestInvalidError,
    UnauthorizedError,
    reply_error,
)
from noetl.events.nats_port import NatsBus
from noetl.events.port import Bus
from noetl.events.runtime import package_version
from noetl.server.api.micro_reads import endpoints as read_endpoints
from noetl.server.api.micro_reads import request_object
from noetl.server.api.queries import (
    execution_namespace,
    execution_status,
    request_status_code,
    signal_refusal,
    valid_execution_id,
)
from noetl.store.audit import record_action
from noetl.store.principals import Principal, Principals, namespace_of

log = logging.getLogger("noetl.server.api")

SERVICE_NAME = "noetl"
QUEUE_GROUP = "noetl"
EXECUTE_SUBJECT = "noetl.api.execute"
STATUS_SUBJECT = "noetl.api.status"
CANCEL_SUBJECT = "noetl.api.cancel"
SIGNAL_SUBJECT = "noetl.api.signal"
PAUSE_SUBJECT = "noetl.api.pause"
RESUME_SUBJECT = "noetl.api.resume"
RERUN_SUBJECT = "noetl.api.rerun"
SCHEDULE_SUBJECT = "noetl.api.schedule.{action}"
SCHEDULE_ACTIONS = ("add", "list", "pause", "resume", "delete")
CATALOG_REGISTER_SUBJECT = "noetl.api.catalog.register"
CATALOG_LIST_SUBJECT = "noetl.api.catalog.list"
# what an outside-input or schedule refusal answers, by error kind (the HTTP API answers the same codes)
OUTSIDE_CODES = {
    "not_found": 404,
    "execution_finished": 409,
    "request_invalid": 400,
    "forbidden": 403,
    "signal_not_awaited": 409,
}


def _semver(v: str) -> str:
    parts = v.split(".")
    return v if len(parts) == 3 and all(p.isdigit() for p in parts) else "0.0.0"


async def _reply(req: Request, body: dict[str, Any], status: int = 200) -> None:
    data = json.dumps(body, default=str).encode()
    if status < 400:
        await req.respond(data)
        return
    message = str((body.get("error") or {}).get("message") or "error")[:500].replace("\n", " ")
    await req.respond_error(str(status), message, data=data)


def _execution_id(req: Request) -> str | dict[str, Any]:
    try:
        body = json.loads(req.data or b"null")
        eid = body["execution_id"] if isinstance(body, dict) else None
    except (ValueError, KeyError):
        eid = None
    if not isinstance(eid, str) or not valid_execution_id(eid):
        return reply_error(RequestInvalidError('send {"execution_id": "..."}'))
    return eid


def _token(req: Request) -> str | None:
    """The caller's token: header ``Authorization: Bearer <token>`` (``nats req -H``)."""
    value = (req.headers or {}).get("Authorization") or ""
    scheme, _, cred = value.partition(" ")
    return cred.strip() or None if scheme.lower() == "bearer" else None


_UNAUTHORIZED = "send the header `Authorization: Bearer <token>` (nats req -H)"


class NatsApiService:
    """With principals configured (``Principals.required``) every request names its caller by the
    header ``Authorization: Bearer <token>``, checked as the HTTP API checks it: NATS's own
    permissions decide who may send on ``noetl.api.*``, the token decides what that request may
    touch (docs/security.md#principals)."""

    def __init__(self, nc: NATS, requests_handler: Any, principals: Principals | None = None) -> None:
        self.nc, self.requests = nc, requests_handler
        self.bus: Bus = NatsBus(nc)  # the port for everything but the micro protocol itself
        self.catalog = getattr(requests_handler, "catalog", None)
        self.principals = principals if principals is not None else Principals()
        self.service: Service | None = None
        self._schedules: Any = None  # the ScheduleStore, opened on the first schedule request

    async def start(self) -> None:
        self.service = await add_service(
            self.nc,
            name=SERVICE_NAME,
            version=_semver(package_version()),
            description="NoETL control plane: start, inspect, signal, pause and cancel executions; schedules",
            queue_group=QUEUE_GROUP,
        )
        for name, subject, handler in (
            ("execute", EXECUTE_SUBJECT, self._execute),
            ("status", STATUS_SUBJECT, self._status),
            ("cancel", CANCEL_SUBJECT, self._cancel),
            ("signal", SIGNAL_SUBJECT, self._signal),
            ("pause", PAUSE_SUBJECT, self._pause),
            ("resume", RESUME_SUBJECT, self._resume),
            ("rerun", RERUN_SUBJECT, self._rerun),
            *(
                (f"schedule_{action}", SCHEDULE_SUBJECT.format(action=action), self._schedule_handler(action))
                for action in SCHEDULE_ACTIONS
            ),
            ("catalog_register", CATALOG_REGISTER_SUBJECT, self._catalog_register),
            ("catalog_list", CATALOG_LIST_SUBJECT, self._catalog_list),
            *read_endpoints(self, _reply),
        ):
            await self.service.add_endpoint(name=name, subject=subject, handler=self._authed(handler))

    def _authed(self, handler: Any) -> Any:
        """``handler`` called with the caller's principal, or a 401 reply without one."""

        async def authed(req: Request) -> None:
            principal = self.principals.identify(_token(req))
            if principal is None:
                await _reply(req, reply_error(UnauthorizedError(_UNAUTHORIZED)), 401)
                return
            try:
                await handler(req, principal)
            except Exception as e:  # never a 30 s client timeout for input nothing foresaw
                log.warning("noetl.api request failed: %s", type(e).__name__)
                failed = RequestInvalidError(f"request failed: {type(e).__name__}")
                await _reply(req, reply_error(failed), 400)

        return authed

    async def _guard(self, req: Request, eid: str, principal: Principal, action: str) -> bool:
        """Whether ``principal`` may ``action`` the execution; replies the refusal when not."""
        namespace = await execution_namespace(self.bus, eid)
        if namespace is None or not principal.may("read", namespace):
            await _reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return False
        if not principal.may(action, namespace):
            err = ForbiddenError(f"principal {principal.name!r} ({principal.role}) may not {action} "
                                 f"executions in namespace {namespace!r}")
            await _reply(req, reply_error(err), 403)
            return False
        return True

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
            self.service = None

    async def _execute(self, req: Request, principal: Principal) -> None:
        msg_id = (req.headers or {}).get("Nats-Msg-Id") or uuid.uuid4().hex
        reply = await self.requests.handle(req.data, msg_id, principal=principal)
        code = request_status_code(reply)
        await _reply(req, reply, 200 if code == 202 else code)

    async def _status(self, req: Request, principal: Principal) -> None:
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        if not await self._guard(req, eid, principal, "read"):
            return
        out = await execution_status(self.bus, eid)
        if out is None:
            await _reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return
        await _reply(req, out)

    async def _outside(self, req: Request, what: str, principal: Principal) -> None:
        """``noetl.api.signal`` ({execution_id, signal, data?, request_id?}), ``noetl.api.pause``
        ({execution_id, reason?}) and ``noetl.api.resume`` ({execution_id})."""
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        if not await self._guard(req, eid, principal, "write"):
            return
        body = json.loads(req.data)
        js = self.bus
        who = principal.name
        refusal = None
        if what == "signal" and isinstance(body.get("signal"), str):
            refusal = await signal_refusal(js, self.catalog, eid, body["signal"], principal)
        if refusal:
            out = reply_error(ForbiddenError(refusal))
        elif what == "signal":
            out = await client_signal(
                js,
                eid,
                body.get("signal"),
                body.get("data"),
                body.get("request_id"),
                principal=who,
                force=body.get("force") is True,
            )
        elif what == "pause":
            out = await client_pause(js, eid, body.get("reason"), principal=who)
        else:
            out = await client_resume(js, eid, principal=who)
        err = out.get("error")
        await record_action(js, action=what, principal=who, target=eid,
                            outcome=err.get("kind", "refused") if err else "done")
        await _reply(req, out, OUTSIDE_CODES.get(err.get("kind"), 400) if err else 200)

    async def _signal(self, req: Request, principal: Principal) -> None:
        await self._outside(req, "signal", principal)

    async def _pause(self, req: Request, principal: Principal) -> None:
        await self._outside(req, "pause", principal)

    async def _resume(self, req: Request, principal: Principal) -> None:
        await self._outside(req, "resume", principal)

    async def _cancel(self, req: Request, principal: Principal) -> None:
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        if not await self._guard(req, eid, principal, "write"):
            return
        reason = json.loads(req.data).get("reason")
        out = await request_cancel(
            self.bus, eid, str(reason) if reason else None, principal=principal.name
        )
        await record_action(self.bus, action="cancel", principal=principal.name, target=eid)
        if out is None:
            await _reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return
        await _reply(req, out)

    async def _rerun(self, req: Request, principal: Principal) -> None:
        """``noetl.api.rerun`` ({execution_id, from?, payload?, playbook? | version?, request_id?,
        dry_run?}): ``POST /api/executions/{id}/rerun`` over NATS, checked the same way (the
        caller must be one that may act on the original, and start executions where the rerun
        runs)."""
        from noetl.server.rerun import prepare_rerun, rerun_options, start_rerun

        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        if not await self._guard(req, eid, principal, "write"):
            return
        body = request_object(req) or {}
        options = rerun_options(body)
        if isinstance(options, str):
            await _reply(req, reply_error(RequestInvalidError(options)), 400)
            return
        js = self.bus
        got = await prepare_rerun(js, self.catalog, eid, **options)
        if isinstance(got, dict):
            await _reply(req, got, 404 if got["error"]["kind"] == "not_found" else 409)
            return
        out = got.to_dict()
        if body.get("dry_run") is True:
            await _reply(req, out)
            return
        reply = await start_rerun(self.requests, got, principal)
        err = reply.get("error")
        await record_action(js, action="rerun", principal=principal.name, target=eid,
                            outcome=err.get("kind", "refused") if err else "done",
                            execution_id=reply.get("execution_id"))
        code = request_status_code(reply)
        await _reply(req, {**out, **reply}, 200 if code == 202 else code)

    async def _catalog_register(self, req: Request, principal: Principal) -> None:
        """``noetl.api.catalog.register`` ({playbook: text}): ``POST /api/catalog`` over NATS, for a
        principal's NATS user, which may not write the catalog's bucket itself."""
        from noetl.dsl.errors import CatalogConflictError, PlaybookInvalidError

        body = request_object(req)
        text = body.get("playbook") if body is not None else None
        if not isinstance(text, str) or self.catalog is None:
            await _reply(req, reply_error(RequestInvalidError('send {"playbook": "<YAML text>"}')), 400)
            return
        js = self.bus
        try:
            out = await self.catalog.register(text, "<request>", principal)
        except PlaybookInvalidError as e:
            await _reply(req, {"error": e.to_dict()}, 422)
            return
        except (ForbiddenError, CatalogConflictError) as e:
            await record_action(js, action="catalog.register", principal=principal.name, target="<refused>",
                                outcome=e.kind)
            await _reply(req, reply_error(e), 403 if isinstance(e, ForbiddenError) else 409)
            return
        await record_action(js, action="catalog.register", principal=principal.name,
                            target=f"{out['path']}@{out.get('version') or 'latest'}",
                            namespace=namespace_of(out["path"]), digest=out["digest"])
        await _reply(req, out)

    async def _catalog_list(self, req: Request, principal: Principal) -> None:
        entries = await self.catalog.list() if self.catalog is not None else []
        visible = [e for e in entries if principal.may("read", namespace_of(e["path"]))]
        await _reply(req, {"playbooks": visible})

    def _schedule_handler(self, action: str) -> Any:
        async def handler(req: Request, principal: Principal) -> None:
            await self._schedule(req, action, principal)

        return handler

    async def _schedule(self, req: Request, action: str, principal: Principal) -> None:
        """``noetl.api.schedule.add`` ({name, path, cron, version?, timezone?, payload?, overlap?}),
        ``.list`` ({}), ``.pause`` / ``.resume`` / ``.delete`` ({name}): the same store calls as
        ``/api/schedules`` and ``noetl schedule``, so the same refusals (400 for a bad name, cron
        expression or time zone, 404 for an unknown schedule)."""
        from noetl.store.schedules import ScheduleStore

        body = request_object(req)
        if body is None:
            await _reply(req, reply_error(RequestInvalidError("send a JSON object")), 400)
            return
        if self._schedules is None:
            self._schedules = await ScheduleStore.open(self.bus)
        store = self._schedules
        if action == "list":
            listed = [s for s in await store.list() if principal.may("read", namespace_of(s.get("path")))]
            await _reply(req, {"schedules": listed})
            return
        name = body.get("name")
        if not isinstance(name, str):
            await _reply(req, reply_error(RequestInvalidError('send {"name": "...", ...}')), 400)
            return
        if action == "add":
            out = await store.add_request(name, body, principal)
        elif action in ("pause", "resume"):
            out = await store.set_paused(name, action == "pause", principal)
        else:
            out = await store.delete(name, principal)
        err = out.get("error")
        await record_action(self.bus, action=f"schedule.{action}", principal=principal.name,
                            target=name, outcome=err.get("kind", "refused") if err else "done")
        await _reply(req, out, OUTSIDE_CODES.get(err.get("kind"), 400) if err else 200)
