"""Two `free_port()` calls never return the same port (issue 27): the OS may hand a just-closed
ephemeral port out again, which started a nats-server as `-p N -m N` about once in 15 000 runs."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from noetl.host import natsserver


class _Socket:
    """A socket whose ephemeral port comes from a script: the OS's worst case, on demand."""

    ports: list[int] = []

    def __init__(self, *args: Any) -> None:
        self.port = 0

    def bind(self, address: tuple[str, int]) -> None:
        self.port = _Socket.ports.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def close(self) -> None:
        pass

    def __enter__(self) -> _Socket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def test_two_calls_never_return_the_same_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socket", _Socket)
    monkeypatch.setattr(natsserver, "_HANDED_OUT", {})
    _Socket.ports = [41000, 41000, 41001]  # the OS gives the closed port back once
    assert natsserver.free_port() == 41000
    assert natsserver.free_port() == 41001


def test_ports_of_one_call_are_distinct(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "socket", _Socket)
    monkeypatch.setattr(natsserver, "_HANDED_OUT", {})
    _Socket.ports = [42000, 42000, 42001, 42002]
    assert natsserver.free_ports(3) == [42000, 42001, 42002]


def test_real_ports_are_distinct() -> None:
    ports = [natsserver.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
