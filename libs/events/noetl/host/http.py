"""A small uvicorn on the process's own event loop, for ports that serve probes and metrics.

It leaves signals alone (the process owns SIGTERM/SIGINT and stops it) and binds the socket
itself, so a taken port is an ``OSError`` for the caller rather than uvicorn exiting the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn


class QuietUvicorn(uvicorn.Server):
    """Leaves signals alone: the process that embeds it owns SIGTERM/SIGINT and stops it.

    (uvicorn's own handlers would replace the CLI's, then restore the handlers from before, so a
    SIGTERM could stop the HTTP side and leave the engine running.)"""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """Bound here: a taken port is an ``OSError`` for the caller, where uvicorn would exit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


class AppServer:
    """``start`` binds and serves ``app``; port 0 picks a free one (read back into ``port``)."""

    def __init__(self, app: Any, host: str, port: int, name: str) -> None:
        self.app, self.host, self.port, self.name = app, host, port, name
        self._server: uvicorn.Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        config = uvicorn.Config(
            self.app,
            host=self.host,
            port=self.port,
            log_level="warning",
            access_log=False,
            lifespan="off",
            timeout_graceful_shutdown=2,
        )
        sock = listen(self.host, self.port)
        self._server = QuietUvicorn(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=self.name)
        while not self._server.started:
            if self._task.done():
                await self._task
                raise RuntimeError(f"{self.name} stopped while starting on {self.host}:{self.port}")
            await asyncio.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None and self._task is not None:
            self._server.should_exit = True
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        self._server = self._task = None
