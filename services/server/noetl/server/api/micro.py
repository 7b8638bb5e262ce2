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
from noetl.dsl.errors import NoSuchEntityError, RequestInvalidError, reply_error
from noetl.events.runtime import package_version
from noetl.server.api.queries import execution_status, request_status_code, valid_execution_id

log = logging.getLogger("noetl.server.api")

SERVICE_NAME = "noetl"
QUEUE_GROUP = "noetl"
EXECUTE_SUBJECT = "noetl.api.execute"
STATUS_SUBJECT = "noetl.api.status"
CANCEL_SUBJECT = "noetl.api.cancel"
SIGNAL_SUBJECT = "noetl.api.signal"
PAUSE_SUBJECT = "noetl.api.pause"
RESUME_SUBJECT = "noetl.api.resume"
SCHEDULE_SUBJECT = "noetl.api.schedule.{action}"
SCHEDULE_ACTIONS = ("add", "list", "pause", "resume", "delete")
# what an outside-input or schedule refusal answers, by error kind (the HTTP API answers the same codes)
OUTSIDE_CODES = {
    "not_found": 404,
    "execution_finished": 409,
    "request_invalid": 400,
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


def _object(req: Request) -> dict[str, Any] | None:
    """The request's JSON object; an empty request (``nats req subject ''``) or ``null`` is an
    empty one, so a list needs no body."""
    try:
        body = json.loads(req.data or b"{}")
    except ValueError:
        return None
    if body is None:
        return {}
    return body if isinstance(body, dict) else None


def _execution_id(req: Request) -> str | dict[str, Any]:
    try:
        body = json.loads(req.data or b"null")
        eid = body["execution_id"] if isinstance(body, dict) else None
    except (ValueError, KeyError):
        eid = None
    if not isinstance(eid, str) or not valid_execution_id(eid):
        return reply_error(RequestInvalidError('send {"execution_id": "..."}'))
    return eid


class NatsApiService:
    def __init__(self, nc: NATS, requests_handler: Any) -> None:
        self.nc, self.requests = nc, requests_handler
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
            *(
                (f"schedule_{action}", SCHEDULE_SUBJECT.format(action=action), self._schedule_handler(action))
                for action in SCHEDULE_ACTIONS
            ),
        ):
            await self.service.add_endpoint(name=name, subject=subject, handler=handler)

    async def stop(self) -> None:
        if self.service is not None:
            await self.service.stop()
            self.service = None

    async def _execute(self, req: Request) -> None:
        msg_id = (req.headers or {}).get("Nats-Msg-Id") or uuid.uuid4().hex
        reply = await self.requests.handle(req.data, msg_id)
        code = request_status_code(reply)
        await _reply(req, reply, 200 if code == 202 else code)

    async def _status(self, req: Request) -> None:
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        out = await execution_status(self.nc.jetstream(), eid)
        if out is None:
            await _reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return
        await _reply(req, out)

    async def _outside(self, req: Request, what: str) -> None:
        """``noetl.api.signal`` ({execution_id, signal, data?, request_id?}), ``noetl.api.pause``
        ({execution_id, reason?}) and ``noetl.api.resume`` ({execution_id})."""
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        body = json.loads(req.data)
        js = self.nc.jetstream()
        if what == "signal":
            out = await client_signal(
                js,
                eid,
                body.get("signal"),
                body.get("data"),
                body.get("request_id"),
                force=body.get("force") is True,
            )
        elif what == "pause":
            out = await client_pause(js, eid, body.get("reason"))
        else:
            out = await client_resume(js, eid)
        err = out.get("error")
        await _reply(req, out, OUTSIDE_CODES.get(err.get("kind"), 400) if err else 200)

    async def _signal(self, req: Request) -> None:
        await self._outside(req, "signal")

    async def _pause(self, req: Request) -> None:
        await self._outside(req, "pause")

    async def _resume(self, req: Request) -> None:
        await self._outside(req, "resume")

    async def _cancel(self, req: Request) -> None:
        eid = _execution_id(req)
        if isinstance(eid, dict):
            await _reply(req, eid, 400)
            return
        reason = json.loads(req.data).get("reason")
        out = await request_cancel(self.nc.jetstream(), eid, str(reason) if reason else None)
        if out is None:
            await _reply(req, reply_error(NoSuchEntityError(f"no execution {eid}")), 404)
            return
        await _reply(req, out)

    def _schedule_handler(self, action: str) -> Any:
        async def handler(req: Request) -> None:
            await self._schedule(req, action)

        return handler

    async def _schedule(self, req: Request, action: str) -> None:
        """``noetl.api.schedule.add`` ({name, path, cron, version?, timezone?, payload?, overlap?}),
        ``.list`` ({}), ``.pause`` / ``.resume`` / ``.delete`` ({name}): the same store calls as
        ``/api/schedules`` and ``noetl schedule``, so the same refusals (400 for a bad name, cron
        expression or time zone, 404 for an unknown schedule)."""
        from noetl.store.schedules import ScheduleStore

        body = _object(req)
        if body is None:
            await _reply(req, reply_error(RequestInvalidError("send a JSON object")), 400)
            return
        if self._schedules is None:
            self._schedules = await ScheduleStore.open(self.nc.jetstream())
        store = self._schedules
        if action == "list":
            await _reply(req, {"schedules": await store.list()})
            return
        name = body.get("name")
        if not isinstance(name, str):
            await _reply(req, reply_error(RequestInvalidError('send {"name": "...", ...}')), 400)
            return
        if action == "add":
            out = await store.add_request(name, body)
        elif action in ("pause", "resume"):
            out = await store.set_paused(name, action == "pause")
        else:
            out = await store.delete(name)
        err = out.get("error")
        await _reply(req, out, OUTSIDE_CODES.get(err.get("kind"), 400) if err else 200)
