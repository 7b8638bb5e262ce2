"""Shared fixtures: a real nats-server per test session (loopback, free port, JetStream in a temp
dir), stopped at the end; PostgreSQL through NOETL_TEST_PG_DSN."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from noetl.host.natsserver import NatsServer

if TYPE_CHECKING:
    from tests.cluster.harness import Recorder

PG_DSN = os.environ.get("NOETL_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


@pytest.fixture(scope="session")
def nats_server() -> Iterator[NatsServer]:
    ns = NatsServer().start()
    try:
        yield ns
    finally:
        ns.stop()


@pytest.fixture
def fresh_nats() -> Iterator[NatsServer]:
    """A server of the test's own, for tests that inspect or restart streams."""
    ns = NatsServer().start()
    try:
        yield ns
    finally:
        ns.stop()


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[object]:
    from noetl.events.bus import connect

    conn = await connect(nats_server.url, name="noetl-test")
    try:
        yield conn
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_dsn() -> str:
    return PG_DSN


@pytest.fixture(autouse=True)
def _root_logging_restored() -> Iterator[None]:
    """A CLI command run in-process (``main([...])``) configures the root logger with a handler on
    the stderr pytest captures for that test, closed once the test ends: later records through it
    would print "Logging error" tracebacks into other tests' output. Put the root logger back."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """The HTTP endpoint the fault and cluster loads POST their records to (exactly-once counts)."""
    from tests.cluster.harness import Recorder

    r = Recorder()
    try:
        yield r
    finally:
        r.close()
