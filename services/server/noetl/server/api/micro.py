"""The NATS service ``noetl`` (NATS Services API: ``nats micro ls`` lists it).

Request-reply for clients that speak NATS but want an answer now: ``noetl.api.execute`` (same
handling as ``POST /api/executions``), ``noetl.api.status`` and ``noetl.api.cancel``. All replicas
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
from noetl.dsl.errors import NoSuchEntityError, RequestInvalidError, reply_error
from noetl.events.runtime import package_version
from noetl.server.api.queries import execution_status, request_status_code, valid_execution_id

log = logging.getLogger("noetl.server.api")

SERVICE_NAME = "noetl"
QUEUE_GROUP = "noetl"
EXECUTE_SUBJECT = "noetl.api.execute"
STATUS_SUBJECT = "noetl.api.status"
CANCEL_SUBJECT = "noetl.api.cancel"


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


class NatsApiService:
    def __init__(self, nc: NATS, requests_handler: Any) -> None:
        self.nc, self.requests = nc, requests_handler
        self.service: Service | None = None

    async def start(self) -> None:
        self.service = await add_service(
            self.nc,
            name=SERVICE_NAME,
            version=_semver(package_version()),
            description="NoETL control plane: start, inspect and cancel executions",
            queue_group=QUEUE_GROUP,
        )
        for name, subject, handler in (
            ("execute", EXECUTE_SUBJECT, self._execute),
            ("status", STATUS_SUBJECT, self._status),
            ("cancel", CANCEL_SUBJECT, self._cancel),
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
