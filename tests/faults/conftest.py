from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.harness import Cluster


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    c.start_nats()
    try:
        yield c
    finally:
        c.close()
