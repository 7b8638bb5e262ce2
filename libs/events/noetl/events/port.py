"""The bus port: the JetStream operations server and worker need, as one interface.

Two implementations keep the same semantics: ``noetl.events.nats_port.NatsBus`` over a real
nats-server, and ``noetl.events.memory.MemoryBus`` in the process, so behaviour tests of the
engine's surroundings run in milliseconds without a nats-server while the fault and cluster
proofs keep the real one. ``tests/service/test_bus_port.py`` runs one contract against both.

What the operations promise (JetStream's own rules, kept by the twin):
- ``publish`` stores a message in the stream whose subjects match, in order; a ``msg_id`` seen
  within the stream's duplicate window stores nothing and answers the first sequence.
- ``read`` and ``follow`` see a stream's messages in sequence order, filtered by subject
  (NATS wildcards ``*`` and ``>``); ``follow`` waits for new ones. A work-queue stream is read
  only through its queue (``BusError`` otherwise, as JetStream refuses such a reader).
- A work queue hands each message to one fetcher; one not acknowledged within ``ack_wait`` is
  delivered again, ``nak(delay)`` delivers it again after the delay, ``term`` never again, and
  after ``max_deliver`` deliveries it is not delivered any more (-1: no limit). An acknowledged
  message leaves a work-queue stream.
- A ``reader`` hands over a stream's messages in order, none skipped: when it cannot go on without
  a gap (a message lost on the way, its consumer gone with a node) it raises ``ReaderLostError``
  and the caller opens a new one after the last message it took.
- A message over the bus's ``max_payload`` or on a subject no retry can store raises
  ``BusRefusedError``: the caller must not retry it.
- A message published with ``Nats-Schedule`` headers is a schedule (JetStream message
  scheduling): ``@at <RFC 3339 time>`` publishes its body once on ``Nats-Schedule-Target`` at that
  time, a cron expression every time it is due (``Nats-Schedule-Time-Zone``), with the header
  ``Nats-Schedule-Next``; a new schedule on the same subject replaces the old one, a purge of its
  subject removes it.
- A key-value bucket keeps the last value of each key with a revision; ``create`` fails when the
  key has a value, ``update`` when the revision is not the last one; a bucket with a ``ttl``
  forgets a key that long after its last write; ``delete`` leaves nothing of the key, not even
  in the bucket's history (a deleted secret must not linger).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

# the port's errors live in the one error tree (noetl.dsl.errors); named here for its callers
from noetl.dsl.errors import BusError as BusError
from noetl.dsl.errors import BusRefusedError as BusRefusedError
from noetl.dsl.errors import BusUnavailableError as BusUnavailableError
from noetl.dsl.errors import KeyExistsError as KeyExistsError
from noetl.dsl.errors import NoStreamError as NoStreamError
from noetl.dsl.errors import ReaderLostError as ReaderLostError
from noetl.dsl.errors import RevisionMismatchError as RevisionMismatchError


@dataclass(frozen=True)
class StreamConfig:
    name: str
    subjects: tuple[str, ...]
    work_queue: bool = False  # messages leave the stream when acknowledged
    duplicate_window: float = 120.0  # seconds a msg_id is remembered
    schedules: bool = False  # takes message schedules (``Nats-Schedule``) and rollups


@dataclass(frozen=True)
class Message:
    subject: str
    data: bytes
    seq: int
    headers: dict[str, str] | None = None
    stamp: float = 0.0  # when the stream stored it (seconds since the epoch; 0 when unknown)

    @property
    def msg_id(self) -> str | None:
        return (self.headers or {}).get("Nats-Msg-Id")


@dataclass(frozen=True)
class PubAck:
    seq: int
    duplicate: bool = False


@dataclass(frozen=True)
class Entry:
    key: str
    value: bytes
    revision: int


@dataclass(frozen=True)
class QueueConfig:
    stream: str
    consumer: str  # durable: fetchers of the same name share the deliveries
    filter: str
    ack_wait: float = 30.0
    max_deliver: int = -1
    extra: dict[str, str] = field(default_factory=dict)


class Delivery(Protocol):
    subject: str
    data: bytes
    seq: int
    delivered: int  # how many times this message has been handed out, this time included
    headers: dict[str, str] | None
    stamp: float  # when the stream stored it (seconds since the epoch)

    @property
    def msg_id(self) -> str | None: ...

    async def ack(self) -> None: ...

    async def nak(self, delay: float = 0.0) -> None: ...

    async def in_progress(self) -> None: ...

    async def term(self) -> None: ...


class WorkQueue(Protocol):
    async def fetch(self, batch: int, timeout: float) -> list[Delivery]: ...

    async def close(self, *, nak: bool = True) -> None:
        """Stop fetching; ``nak``: what was handed out and not answered goes back at once."""
        ...


class Reader(Protocol):
    async def fetch(self, batch: int, timeout: float) -> list[Message]:
        """The next messages in stream order ([] after ``timeout``); ``ReaderLostError`` when the
        next one cannot be handed over without a gap."""
        ...

    async def close(self) -> None: ...


class EventOutbox(Protocol):
    """Messages of one run, sent in order and confirmed stored together (``confirm``)."""

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None: ...

    async def confirm(self) -> None: ...


class Subscription(Protocol):
    async def unsubscribe(self) -> None: ...


class KeyValue(Protocol):
    async def get(self, key: str) -> Entry | None: ...

    async def put(self, key: str, value: bytes) -> int: ...

    async def create(self, key: str, value: bytes) -> int: ...

    async def update(self, key: str, value: bytes, last: int) -> int: ...

    async def delete(self, key: str, *, last: int | None = None) -> None:
        """``last``: only while the key's last revision is ``last`` (``RevisionMismatchError``)."""
        ...

    async def ttl(self) -> float | None:
        """The bucket's TTL as stored now (another process may have changed it)."""
        ...

    async def keys(self, prefix: str = "") -> list[str]: ...

    async def purge(self, pattern: str) -> None:
        """Every key matching ``pattern`` (NATS wildcards over the dotted key) gone, in one call."""
        ...

    async def put_nowait(self, key: str, value: bytes) -> None:
        """A put nobody waits for (a snapshot: one lost only means resuming from an earlier one)."""
        ...


class ObjectStore(Protocol):
    async def put(self, name: str, data: bytes) -> None: ...

    async def get(self, name: str) -> bytes | None: ...


class Bus(Protocol):
    async def prepare(self, replicas: int | None = None) -> None:
        """Declare every stream and bucket of a deployment (``noetl.events.streams``)."""
        ...

    async def add_stream(self, config: StreamConfig) -> None: ...

    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> Subscription:
        """Every message published on ``subject`` from now on, stored or not (core NATS)."""
        ...

    def outbox(self, *, ack_all: bool = False, confirm_every: int | None = 64) -> EventOutbox:
        """``confirm_every``: plain messages between confirmations (None: only at ``confirm``)."""
        ...

    async def publish(
        self, subject: str, data: bytes, *, msg_id: str | None = None, headers: dict[str, str] | None = None
    ) -> PubAck: ...

    async def read(
        self, stream: str, filters: list[str], *, start_seq: int = 1, before_seq: int | None = None
    ) -> list[Message]: ...

    def follow(
        self, stream: str, filters: list[str], *, start_seq: int = 1
    ) -> AsyncGenerator[Message, None]:
        """A stream's messages from ``start_seq`` on, waiting for new ones; ``aclose()`` it to
        release what it holds (its consumer) rather than leave that to the garbage collector."""
        ...

    async def reader(self, stream: str, filters: list[str], *, start_seq: int = 1, name: str = "") -> Reader:
        """``name`` names the reader where the transport shows it (a consumer name)."""
        ...

    async def last(self, stream: str, subject: str) -> Message | None: ...

    async def count(self, stream: str) -> int: ...

    async def purge(self, stream: str, subject: str | None = None) -> None: ...

    async def queue(self, config: QueueConfig) -> WorkQueue: ...

    async def kv(self, bucket: str, *, ttl: float | None = None, history: int = 1) -> KeyValue:
        """Opened or created; a ``ttl`` different from an existing bucket's is applied to it."""
        ...

    async def objects(self, bucket: str) -> ObjectStore: ...


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: ``*`` is one token, ``>`` one or more at the end."""
    want, have = pattern.split("."), subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


async def store_all(bus: Bus, messages: list[tuple[str, bytes, str]]) -> None:
    """Publish (subject, data, msg_id) in order and return once every one is stored: a failure
    raises, and publishing them again stores each once (their ids)."""
    box = bus.outbox(ack_all=True)
    for subject, data, msg_id in messages:
        await box.send(subject, data, msg_id, ack=True)
    await box.confirm()
