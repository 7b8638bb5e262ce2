"""What several suites share: a server and a worker on one bus, waiting for a condition, and the
contract fixture that runs a test on both buses."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from noetl.events.memory import MemoryBus
from noetl.events.port import Bus


@asynccontextmanager
async def running(bus: Bus, **worker: Any) -> AsyncIterator[tuple[Any, Any]]:
    """A server and a worker (``concurrency`` 8 unless given) on ``bus``; both stopped at the
    end, the worker without draining."""
    from noetl.server.service import Server
    from noetl.worker.service import Worker

    server, wk = Server(bus), Worker(bus, **{"concurrency": 8, **worker})
    await server.start()
    await wk.start()
    try:
        yield server, wk
    finally:
        await wk.stop(drain=False)
        await server.stop()


async def until(
    what: Callable[[], Awaitable[Any]], timeout: float = 15.0, *, every: float = 0.05, context: str = ""
) -> Any:
    """The first truthy answer of ``what``, asked every ``every`` seconds; fails after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await what()
        if got:
            return got
        await asyncio.sleep(every)
    raise AssertionError(f"timed out waiting{chr(10) + context if context else ''}")


@pytest.fixture(params=["memory", "nats"])
async def bus(request: Any, nats_server: Any) -> AsyncIterator[Any]:
    """The test on the in-memory twin and on ``NatsBus`` over the session's nats-server: a
    difference between them is a bug of the twin. Streams are the test's own to declare."""
    if request.param == "memory":
        mem = MemoryBus()
        try:
            yield mem
        finally:
            await mem.close()
        return
    from noetl.events.bus import connect
    from noetl.events.nats_port import NatsBus

    nc = await connect(nats_server.url, name=f"noetl-test-{request.node.name}"[:60])
    try:
        yield NatsBus(nc)
    finally:
        await nc.close()


def loaded_by(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has imported after running ``code``: start-up
    cost is guarded by what a command must not import (tests/service/test_run_imports.py)."""
    import json
    import subprocess
    import sys

    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in {modules!r} if m in sys.modules]))\n"
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    loaded: list[str] = json.loads(p.stdout.strip().splitlines()[-1])
    return loaded
