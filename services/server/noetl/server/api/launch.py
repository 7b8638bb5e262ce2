"""What ``noetl server`` and ``noetl worker`` run beside their service.

A server gets the HTTP API (unless disabled), the NATS service ``noetl`` (over a NATS connection
only: it is the NATS micro protocol) and a runtime entry; a worker gets its runtime entry only.
Kept out of the CLI module so the CLI edit stays two lines and tests can start the same set
without a subprocess.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from noetl.events.port import Bus
from noetl.events.runtime import DEFAULT_INTERVAL, DEFAULT_TTL, RuntimeRegistrar
from noetl.server.api.micro import NatsApiService
from noetl.server.api.server import ApiServer, api_tokens
from noetl.store.audit import ensure_audit_stream
from noetl.store.principals import Principals

log = logging.getLogger("noetl.server.api")


class Operations:
    def __init__(self) -> None:
        self.parts: list[Any] = []
        self.api: ApiServer | None = None
        self.registrar: RuntimeRegistrar | None = None

    async def stop(self) -> None:
        for part in reversed(self.parts):
            with contextlib.suppress(Exception):
                await part.stop()
        self.parts.clear()


def _server_info(svc: Any, ops: Operations) -> dict[str, Any]:
    return {
        "concurrency": svc.partitions,
        "running": len(svc.states),
        "partitions": list(svc.owned),
        "http": ops.api.url if ops.api is not None else None,
    }


def _worker_info(svc: Any) -> dict[str, Any]:
    return {
        "pool": svc.pool,
        "concurrency": svc.concurrency,
        "running": svc.busy,
        "completed": svc.completed,
        "task_durations": {status: h.to_dict() for status, h in svc.task_durations.items()},
    }


async def _start_nats_service(bus: Bus, nc: Any, svc: Any, ops: Operations, auth_file: str | None) -> None:
    """The NATS service (``noetl.api.*``) beside the HTTP API, with the same principals, so a
    caller without HTTP access is checked the same way; its actions are audited, HTTP or not."""
    await ensure_audit_stream(bus)
    principals = ops.api.ctx.principals if ops.api is not None else Principals.load(*api_tokens(), auth_file)
    micro = NatsApiService(nc, svc.requests, principals)
    await micro.start()
    ops.parts.append(micro)


async def start_operations(
    bus: Bus,
    role: str,
    svc: Any,
    *,
    http_host: str = "127.0.0.1",
    http_port: int = 8080,
    heartbeat: float = DEFAULT_INTERVAL,
    ttl: float = DEFAULT_TTL,
    insecure: bool | None = None,
    auth_file: str | None = None,
    listener: Any = None,
) -> Operations:
    """Start the parts for ``role`` around an already started ``svc``; ``http_port < 0`` turns HTTP off.
    ``listener``: the ``HttpListener`` that has served the probes since start-up (the API takes
    its port over)."""
    nc = getattr(bus, "nc", None)  # the in-memory twin has none: no NATS service then
    ops = Operations()
    try:
        if role == "server":
            if http_port >= 0:
                ops.api = ApiServer(
                    bus,
                    svc.requests,
                    svc.catalog,
                    svc.credentials,
                    host=http_host,
                    port=http_port,
                    insecure=insecure,
                    auth_file=auth_file,
                    listener=listener,
                )
                ops.api.ctx.liveness = svc.liveness
                await ops.api.start()
                ops.parts.append(ops.api)
                svc.observer = ops.api.collector.observe
            if nc is not None:
                await _start_nats_service(bus, nc, svc, ops, auth_file)

            def info() -> dict[str, Any]:
                return _server_info(svc, ops)
        else:

            def info() -> dict[str, Any]:
                return _worker_info(svc)

        ops.registrar = RuntimeRegistrar(
            bus, role, info, id=getattr(svc, "worker_id", None), interval=heartbeat, ttl=ttl
        )
        await ops.registrar.start()
        ops.parts.append(ops.registrar)
    except BaseException:
        await ops.stop()
        raise
    return ops
