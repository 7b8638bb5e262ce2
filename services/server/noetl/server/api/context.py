"""What every route needs, handed over once when the app is built (no module globals).

The route modules stay free of start-up order and of each other: they read the bus, the request
handler, the catalog and the keychain store from here. The bus is the port
(``noetl.events.port``), so the API serves on the in-memory twin as on NATS; only what is NATS
itself (a readiness probe's connection, durable consumers' lag) looks for the connection under it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from noetl.dsl.errors import BodyTooLargeError, NoetlError, RequestInvalidError, reply_error
from noetl.server.api.metrics import Metrics
from noetl.store.principals import ANONYMOUS, Principal, Principals


@dataclass
class ApiContext:
    bus: Any  # noetl.events.port.Bus
    requests: Any  # noetl.server.requests.RequestHandler
    catalog: Any  # noetl.store.catalog.Catalog
    credentials: Any  # noetl.store.credentials.CredentialStore
    token: str | None = None
    admin_token: str | None = None
    principals: Principals = field(default_factory=Principals)
    sessions: Any = None  # noetl.server.api.auth.SessionGenerations, set when the app is built
    metrics: Metrics = field(default_factory=Metrics)
    # the server's own account of its deciding (``Server.liveness``): owned partitions, those
    # without a live reader, restarts; None where no server runs beside the API
    liveness: Callable[[], dict[str, Any]] | None = None
    closing: asyncio.Event = field(default_factory=asyncio.Event)
    nats_state: Any = None  # noetl.events.connection.ConnectionState, when the process made one

    @property
    def nc(self) -> Any:
        """The NATS connection under the bus; None on the in-memory twin, which has none to probe."""
        return getattr(self.bus, "nc", None)


def ctx_of(request: Request) -> ApiContext:
    ctx: ApiContext = request.app.state.noetl
    return ctx


def error(status: int, cls: type[NoetlError], message: str, **extra: Any) -> JSONResponse:
    """An API refusal: its kind comes from the error tree, never a string of its own."""
    return JSONResponse(reply_error(cls(message, **extra)), status_code=status)


def auth_of(request: Request) -> dict[str, Any]:
    """``{role, who, name, principal}`` set by the auth middleware; ``role`` is ``admin``,
    ``operator`` or ``viewer`` (an API without principals: ``anonymous``, an admin)."""
    return request.scope.get("noetl.auth") or {
        "role": "admin", "who": "anonymous", "name": "anonymous", "principal": ANONYMOUS
    }


def principal_of(request: Request) -> Principal:
    """The caller, as the auth middleware identified it."""
    return auth_of(request).get("principal") or ANONYMOUS


def forbidden(principal: Principal, action: str, namespace: str | None, what: str) -> JSONResponse:
    """The 403 of a principal acting outside its role or namespaces; names no token."""
    from noetl.dsl.errors import ForbiddenError

    return error(
        403, ForbiddenError,
        f"principal {principal.name!r} ({principal.role}) may not {action} {what} "
        f"in namespace {namespace or ''!r}",
    )


MAX_BODY = 2 * 1024 * 1024  # above NATS's 1 MiB message limit: what passes is refused downstream


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The body, refused past ``limit`` before it is all in memory (a 413, not an OOM)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BodyTooLargeError(f"body is {declared} bytes; the limit is {limit}")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(f"body is over the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def body_error(e: ValueError) -> JSONResponse:
    if isinstance(e, BodyTooLargeError):
        return error(413, RequestInvalidError, str(e))
    return error(400, RequestInvalidError, str(e))


async def json_body(request: Request) -> Any:
    """The parsed body; raises ValueError with a message fit for a 400 (413 when too large)."""
    raw = await read_body(request)
    try:
        return json.loads(raw or b"null")
    except ValueError as e:
        raise ValueError(f"body is not JSON: {e}") from None


async def guard_execution(request: Request, execution_id: str, action: str) -> Response | None:
    """None when the caller may ``action`` (``read`` or ``write``) the execution; else its refusal.
    An execution in a namespace the caller may not even read is answered as one that does not
    exist (404), so ids of other namespaces cannot be probed."""
    from noetl.dsl.errors import NoSuchEntityError
    from noetl.server.api.queries import execution_namespace

    principal = principal_of(request)
    namespace = await execution_namespace(ctx_of(request).bus, execution_id)
    if namespace is None or not principal.may("read", namespace):
        return error(404, NoSuchEntityError, f"no execution {execution_id}")
    if action != "read" and not principal.may(action, namespace):
        return forbidden(principal, action, namespace, f"execution {execution_id}")
    return None
