"""``noetl server`` and ``noetl worker``: one process, assembled in the order its probes need.

The HTTP port comes first (the server's probes say what is wrong while NATS is not reached), then
NATS, waited for as long as it takes and logged while it fails, then the check that this
nats-server can run NoETL, then the service on the bus adapter chosen here, once for the process.
SIGTERM or SIGINT stop it at any point, cleanly and with exit code 0, also while it still starts
(waiting for NATS, a cluster electing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from collections.abc import Callable
from typing import Any

Say = Callable[..., None]


def _settle_heap() -> None:
    """Once started: what start-up allocated (modules, the playbook cache's first entries,
    connections) leaves the collector's view (``gc.freeze``), so a full collection walks only
    what the work allocates; and a young generation of 50 000 objects instead of 700, so a busy
    service collects every few thousand messages instead of every few dozen."""
    from noetl.events.settings import setting

    if setting("gc_tune"):
        import gc

        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)


class _Process:
    """What one service process has started, each part stopped in reverse order."""

    def __init__(self, args: argparse.Namespace, role: str, say: Say) -> None:
        self.args, self.role, self.say = args, role, say
        self.nc: Any = None
        self.svc: Any = None
        self.ops: Any = None
        self.listener: Any = None
        self.ops_http: Any = None

    async def start(self) -> None:
        from noetl.events.bus import connect
        from noetl.events.connection import ConnectionState, check_server, redact_urls

        args, role = self.args, self.role
        where = redact_urls(args.nats_url)
        state = ConnectionState(where)
        await self._probes(state)
        self.nc = await connect(args.nats_url, name=f"noetl-{role}", state=state)
        await check_server(self.nc, role)
        await self._service()
        _settle_heap()
        self.say(role, f"running against {where}", nats=where)
        if self.ops.api is not None:
            self.say(role, f"HTTP API on {self.ops.api.url}", url=self.ops.api.url)

    async def _probes(self, state: Any) -> None:
        """The server's /health and /ready (its principals read first: a bad auth file stops the
        start here), or the worker's /health, /ready and /metrics, before NATS."""
        from noetl.events.settings import setting

        args, role = self.args, self.role
        if args.http_port < 0:
            return
        if role == "worker":
            from noetl.worker.http import WorkerHttp

            self.ops_http = WorkerHttp(None, state, host=args.http_host, port=args.http_port, pool=args.pool)
            await self.ops_http.start()
            self.say(role, f"/health, /ready and /metrics on {self.ops_http.url}", url=self.ops_http.url)
            return
        from noetl.server.api.listener import HttpListener
        from noetl.server.api.server import api_tokens, check_exposure
        from noetl.store.principals import Principals

        insecure = bool(getattr(args, "insecure", False)) or bool(setting("api_insecure"))
        token, admin_token = api_tokens()
        principals = Principals.load(token, admin_token, getattr(args, "auth_file", None))
        check_exposure(args.http_host, token or ("principals" if principals.required else None), insecure)
        self.listener = HttpListener(args.http_host, args.http_port, state)
        await self.listener.start()
        url = self.listener.url
        self.say(role, f"/health and /ready on {url} (the API follows once NATS is reached)", url=url)

    async def _service(self) -> None:
        from noetl.events.nats_port import NatsBus
        from noetl.events.settings import setting
        from noetl.server.api.launch import start_operations

        args, role = self.args, self.role
        bus = NatsBus(self.nc, replicas=args.replicas)  # the adapter, chosen once for the process
        if role == "server":
            from noetl.server.service import Server

            self.svc = Server(bus, partitions=args.partitions, replicas=args.replicas)
        else:
            from noetl.worker.service import Worker

            self.svc = Worker(bus, pool=args.pool, concurrency=args.concurrency, replicas=args.replicas)
        await self.svc.start()
        if self.ops_http is not None:
            self.ops_http.attach(self.svc)
        self.ops = await start_operations(
            bus,
            role,
            self.svc,
            http_host=args.http_host,
            http_port=args.http_port if role == "server" else -1,
            insecure=True if getattr(args, "insecure", False) or setting("api_insecure") else None,
            auth_file=getattr(args, "auth_file", None),
            listener=self.listener,
        )

    async def stop(self) -> None:
        for part in (self.ops, self.ops_http, self.listener):
            if part is not None:
                await part.stop()
        if self.svc is not None:
            with contextlib.suppress(Exception):
                await self.svc.stop()
        if self.nc is not None:
            try:
                await asyncio.wait_for(self.nc.drain(), timeout=10)
            except Exception:  # a subscription stopped mid-fetch can hold drain forever: exit anyway
                await self.nc.close()


async def serve(args: argparse.Namespace, role: str, say: Say) -> None:
    """Run until SIGTERM or SIGINT. The handlers go in first, so a process stopped while it
    still starts stops cleanly too; a start-up error (``DeploymentError``) ends it, after the
    parts already started are stopped."""
    from noetl.events import tracing

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    process = _Process(args, role, say)
    tracing.configure_from_env(f"noetl-{role}")  # OTEL_EXPORTER_OTLP_ENDPOINT: spans over OTLP
    starting = asyncio.create_task(process.start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()
            await stopping
        else:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
    finally:  # also after a start-up error: the service's loops must not outlive it
        stopping.cancel()
        await process.stop()
        tracing.shutdown()  # the last spans are flushed
