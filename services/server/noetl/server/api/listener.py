"""The server's HTTP port, open from the first second, before NATS is reached.

A server that cannot reach NATS used to open no port at all: probes timed out and nothing said
why. ``HttpListener`` binds at once and serves the probes from the state of the NATS connection
(``noetl.events.connection.ConnectionState``): ``/health`` answers 503 naming the NATS URL
(credentials stripped) and the last connect error, ``/ready`` 503, ``/live`` 200 (the process
runs: restarting it would not bring NATS back). Once the service has started, the full API
(``ApiServer``) takes the same socket over: no gap, no second port.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from noetl.dsl.errors import UnavailableError, reply_error
from noetl.events.connection import ConnectionState
from noetl.host.http import AppServer

log = logging.getLogger("noetl.server.api")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


def nats_status(state: ConnectionState | None, nc: Any) -> dict[str, Any] | None:
    """The NATS part of a probe's answer: the connection state with ``connected`` read live from
    the client when there is one (the in-memory twin has neither: None)."""
    if state is None:
        return None if nc is None else {"connected": bool(nc.is_connected)}
    out = state.to_dict()
    if nc is not None:
        out["connected"] = bool(nc.is_connected)
    return out


def starting_app(state: ConnectionState) -> Starlette:
    """What the port answers until the service has started."""

    def why() -> tuple[str, str]:
        if not state.connected:
            cause = f": {state.last_error}" if state.last_error else ""
            return "nats_unreachable", f"NATS at {state.url} is not reachable{cause}"
        return "starting", f"connected to NATS at {state.url}; the server is still starting"

    async def health(request: Request) -> Response:
        status, message = why()
        return JSONResponse({"status": status, "message": message, "nats": state.to_dict()}, status_code=503)

    async def ready(request: Request) -> Response:
        _, message = why()
        body = {"status": "not_ready", "reason": message, "checks": {"nats": state.connected}}
        return JSONResponse({**body, "nats": state.to_dict()}, status_code=503)

    async def live(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def unavailable(request: Request) -> Response:
        _, message = why()
        return JSONResponse(
            reply_error(UnavailableError(f"{message}; try again when /ready answers 200")),
            status_code=503,
            headers={"Retry-After": "5"},
        )

    return Starlette(
        routes=[
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
            Route("/live", live, methods=["GET"]),
            Route("/{path:path}", unavailable, methods=["GET", "POST", "PUT", "DELETE", "PATCH"]),
        ]
    )


class HttpListener:
    """One uvicorn on one socket for the life of the process; ``attach`` swaps the app it serves."""

    def __init__(self, host: str, port: int, state: ConnectionState) -> None:
        self.host, self.port = host, port
        self.state = state
        self._starting: App = starting_app(state)
        self._app: App | None = None
        self._http: AppServer | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await (self._app or self._starting)(scope, receive, send)

    def attach(self, app: App | None) -> None:
        """Serve ``app`` from now on (None: the start-up answers again)."""
        self._app = app

    async def start(self) -> None:
        self._http = AppServer(self, self.host, self.port, "noetl-http")
        await self._http.start()
        self.port = self._http.port
        log.info("HTTP probes listening on %s", self.url)

    async def stop(self) -> None:
        if self._http is not None:
            await self._http.stop()
            self._http = None
