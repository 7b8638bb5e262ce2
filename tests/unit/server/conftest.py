"""A server and a worker on the in-memory bus (``noetl.events.memory``): the engine's surroundings
(requests, partitions, leases, storing decisions, the worker's pipelines) in milliseconds, with no
nats-server. What these tests show is behaviour; the guarantees under kills, cuts and elections
are proven over real nats-servers in tests/faults and tests/cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl.events.memory import MemoryBus
from noetl.server.service import Server
from noetl.worker.service import Worker


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = MemoryBus()
    try:
        yield bus
    finally:
        close = getattr(bus, "close", None)
        if close is not None:
            await close()


@pytest.fixture
async def services(bus: MemoryBus) -> AsyncIterator[tuple[Server, Worker]]:
    server, worker = Server(bus), Worker(bus, concurrency=8)
    await server.start()
    await worker.start()
    try:
        yield server, worker
    finally:
        await worker.stop(drain=False)
        await server.stop()


def bus_of(services: Any) -> Any:
    return services[0].bus
