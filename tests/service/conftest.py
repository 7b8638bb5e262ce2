"""A server and a worker on the session's nats-server, for tests that run executions."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl.events.nats_port import NatsBus
from tests.support import bus, running  # noqa: F401  (bus: the fixture of the port contract tests)


@pytest.fixture
async def services(nc: Any) -> AsyncIterator[tuple[Any, Any]]:
    async with running(NatsBus(nc)) as both:
        yield both
