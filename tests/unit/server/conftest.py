"""A server and a worker on the in-memory bus (``noetl.events.memory``): the engine's surroundings
(requests, partitions, leases, storing decisions, the worker's pipelines) in milliseconds, with no
nats-server. What these tests show is behaviour; the guarantees under kills, cuts and elections
are proven over real nats-servers in tests/faults and tests/cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl.events.memory import MemoryBus
from tests.support import running


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = MemoryBus()
    try:
        yield bus
    finally:
        await bus.close()


@pytest.fixture
async def services(bus: MemoryBus) -> AsyncIterator[tuple[Any, Any]]:
    async with running(bus) as both:
        yield both
