"""A server, a worker and the HTTP API with the console on one nats-server, in a thread of its own.

The browser is driven with Playwright's synchronous API, which cannot run inside an asyncio
loop; the services run on a loop in this thread instead, so one stack (and one browser) serves
every test of the session, as it would serve a person. ``scripts/console_screenshots.py`` uses
the same stack for the pictures in docs/console.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any

import httpx

from noetl.events.nats_port import NatsBus

TOKEN = "console-" + uuid.uuid4().hex


class ConsoleStack:
    def __init__(self, nats_url: str, *, token: str = TOKEN, worker_concurrency: int = 4) -> None:
        self.nats_url, self.token, self.concurrency = nats_url, token, worker_concurrency
        self.url = ""
        self.worker_id = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="console-stack", daemon=True)
        self.http: httpx.Client | None = None

    def start(self, timeout: float = 60.0) -> ConsoleStack:
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            raise RuntimeError(f"the console stack did not start: {self._error!r}")
        self.http = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30
        )
        return self

    def stop(self) -> None:
        if self.http is not None:
            self.http.close()
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already ended
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread.ident is not None:  # started
            self._thread.join(60)

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # reported to start(); a thread must not raise into pytest
            self._error = e
            self._ready.set()

    async def _main(self) -> None:
        from noetl.events.bus import connect
        from noetl.events.runtime import RuntimeRegistrar
        from noetl.server.api import ApiServer
        from noetl.server.api.launch import start_operations
        from noetl.server.service import Server
        from noetl.store.credentials import CredentialStore, generate_key
        from noetl.worker.service import Worker

        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        nc = await connect(self.nats_url, name="noetl-console-test")
        parts: list[Any] = []
        server = worker = None
        try:
            bus = NatsBus(nc)  # the adapter, made once for the stack's services
            creds = await CredentialStore.open(bus, generate_key())
            server = Server(bus, credentials=creds)
            worker = Worker(bus, concurrency=self.concurrency, credentials=creds)
            await server.start()
            await worker.start()
            api = ApiServer(
                server.bus, server.requests, server.catalog, creds, host="127.0.0.1", port=0, token=self.token
            )
            await api.start()
            parts.append(api)
            server.observer = api.collector.observe
            registrar = RuntimeRegistrar(
                bus,
                "server",
                lambda: {"running": len(server.states), "http": api.url},
                interval=0.5,
                ttl=3.0,
            )
            await registrar.start()
            parts.append(registrar)
            worker_ops = await start_operations(bus, "worker", worker, heartbeat=0.5, ttl=3.0)
            parts.append(worker_ops)
            assert worker_ops.registrar is not None
            self.url, self.worker_id = api.url, worker_ops.registrar.id
            self._ready.set()
            await self._stop.wait()
        finally:
            for part in reversed(parts):
                with contextlib.suppress(Exception):
                    await part.stop()
            if worker is not None:
                with contextlib.suppress(Exception):
                    await worker.stop(drain=False)
            if server is not None:
                with contextlib.suppress(Exception):
                    await server.stop()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 5)

    # --- what a test asks of the API (the browser does the rest) ---

    def start_execution(self, playbook: str, payload: dict[str, Any] | None = None) -> str:
        assert self.http is not None
        r = self.http.post("/api/executions", json={"playbook": playbook, "payload": payload or {}})
        assert r.status_code == 202, r.text
        return str(r.json()["execution_id"])

    def register(self, playbook: str) -> dict[str, Any]:
        assert self.http is not None
        r = self.http.post("/api/catalog", content=playbook, headers={"Content-Type": "application/yaml"})
        assert r.status_code == 201, r.text
        return dict(r.json())

    def status(self, execution_id: str) -> dict[str, Any]:
        assert self.http is not None
        return dict(self.http.get(f"/api/executions/{execution_id}").json())

    def wait_status(self, execution_id: str, statuses: set[str], timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body = self.status(execution_id)
            if body.get("status") in statuses and body.get("finished_at"):
                return body
            if time.monotonic() > deadline:
                raise AssertionError(f"{execution_id} is {body.get('status')}, not one of {statuses}")
            time.sleep(0.1)

    def wait_step(self, execution_id: str, step: str, timeout: float = 30.0) -> None:
        """Until the server has scheduled ``step`` (a page opened after this shows it running)."""
        deadline = time.monotonic() + timeout
        while step not in (self.status(execution_id).get("steps") or {}):
            if time.monotonic() > deadline:
                raise AssertionError(f"step {step} of {execution_id} was not scheduled")
            time.sleep(0.05)
