"""Real processes for fault tests: a nats-server with a store dir that survives restarts, and
`noetl server` / `noetl worker` subprocesses that a test can SIGKILL, SIGTERM and start again.

Every process started here is stopped by ``Cluster.close()`` (the fixture calls it)."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from noetl.events.bus import connect
from noetl.host.natsserver import NatsServer

ROOT = Path(__file__).resolve().parents[2]

# short leases so a killed worker's commands come back in seconds, not the production 30 s
FAST_ENV = {"NOETL_ACK_WAIT": "2", "NOETL_LOG_LEVEL": "WARNING"}


class Cluster:
    def __init__(self) -> None:
        self.store = tempfile.mkdtemp(prefix="noetl-faults-")
        self.nats = NatsServer(store_dir=self.store)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    @property
    def url(self) -> str:
        return self.nats.url

    def start_nats(self) -> None:
        self.nats.start()

    def _spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = Path(self.store) / f"proc-{len(self.procs)}-{args[0]}.log"
        self.logs.append(log)
        full_env = {**os.environ, **FAST_ENV, **(env or {})}
        with log.open("wb") as fh:
            p = subprocess.Popen(
                [sys.executable, "-m", "noetl.cli.main", *args, "--nats-url", self.url],
                stdout=fh,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                env=full_env,
            )
        self.procs.append(p)
        return p

    def server(self) -> subprocess.Popen[bytes]:
        return self._spawn("server", "--http-port", "-1")

    def worker(self, concurrency: int = 16, pool: str = "default") -> subprocess.Popen[bytes]:
        return self._spawn("worker", "--pool", pool, "--concurrency", str(concurrency))

    def kill(self, p: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> int:
        p.send_signal(sig)
        return p.wait(timeout=30)

    def output(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.logs if p.exists()
        )

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.nats.stop()
        shutil.rmtree(self.store, ignore_errors=True)


async def client(url: str) -> Any:
    """A client that, like every service, declares the streams it needs (idempotent)."""
    from noetl.events.streams import ensure_all

    nc = await connect(url, name="noetl-fault-test")
    await ensure_all(nc.jetstream())
    return nc


async def count_events(
    nc: Any, execution_id: str, name: str, enough: Callable[[int], bool], timeout: float = 60
) -> int:
    """Wait until the number of ``name`` events of the execution seen since now satisfies
    ``enough``: on their own subject or inside a batch (an ``exec: local`` loop's)."""
    from noetl.events import subjects as s
    from noetl.events.batches import events_in

    seen = 0
    done = asyncio.Event()

    async def cb(m: Any) -> None:
        nonlocal seen
        seen += sum(e.get("name") == name for e in events_in(m.data))
        if enough(seen):
            done.set()

    sub = await nc.subscribe(s.execution_events_filter(execution_id), cb=cb)
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        await sub.unsubscribe()
    return seen
