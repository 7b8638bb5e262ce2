"""A server and a worker on the session's nats-server, for tests that run executions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl.server.service import Server
from noetl.worker.service import Worker


@pytest.fixture
async def services(nc: Any) -> AsyncIterator[tuple[Server, Worker]]:
    server, worker = Server(nc), Worker(nc, concurrency=8)
    await server.start()
    await worker.start()
    try:
        yield server, worker
    finally:
        await worker.stop(drain=False)
        await server.stop()
