"""Fixtures of the node-loss tests: a 3-node JetStream cluster, an HTTP recorder and service
subprocesses, each closed (every process stopped, temp dirs removed) when the test ends.

Every test here is marked ``slow`` and ``cluster`` (select with ``-m cluster``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.harness import NatsCluster, Services

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster: needs a 3-node nats-server cluster on loopback (tests/cluster)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.cluster)


@pytest.fixture
def nats_cluster() -> Iterator[NatsCluster]:
    c = NatsCluster().start()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def services(nats_cluster: NatsCluster) -> Iterator[Services]:
    svc = Services(nats_cluster.url_list, ack_wait=10)
    try:
        yield svc
    finally:
        svc.close()
