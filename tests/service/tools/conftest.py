"""A nats-server of this folder's own for the keychain-store tests (the bucket name is global, so
they must not share a server with tests that store credentials of their own)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from noetl.host.natsserver import NatsServer


@pytest.fixture
def own_nats_url() -> Iterator[str]:
    """Ready only once JetStream answers (the shared launcher waits on /healthz)."""
    with NatsServer() as ns:
        yield ns.url
