"""The bus port (``noetl.events.port``) over a real nats-server, with nats-py.

Each operation maps to the JetStream call that has the promised semantics: a publish with
``Nats-Msg-Id`` (dedupe in the stream's window), ephemeral consumers without acks for reads,
durable pull consumers with explicit acks for work queues, KV buckets and object stores.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    RetentionPolicy,
    StorageType,
)
from nats.js.api import (
    StreamConfig as NatsStreamConfig,
)
from nats.js.errors import (
    BadRequestError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    NotFoundError,
    ObjectNotFoundError,
)

from noetl.events.outbox import Outbox
from noetl.events.port import (
    BusError,
    Entry,
    KeyExistsError,
    Message,
    NoStreamError,
    PubAck,
    QueueConfig,
    RevisionMismatchError,
    StreamConfig,
)
from noetl.events.puller import Puller, ack_stored
from noetl.events.retry import retrying
from noetl.events.streams import ensure_all, ensure_consumer, ensure_kv, ensure_object_store
from noetl.events.subjects import kv_subject


def as_bus(conn: Any, *, replicas: int | None = None) -> Any:
    """The bus port (``noetl.events.port``) of what a caller holds: a bus as it is (``NatsBus``
    or the in-memory twin), a nats-py connection or JetStream context wrapped in a ``NatsBus``.
    The one place that tells them apart, so services and stores accept either."""
    if hasattr(conn, "queue") and hasattr(conn, "outbox"):
        return conn
    if isinstance(conn, JetStreamContext):
        return NatsBus.of(conn, replicas=replicas)
    return NatsBus(conn, replicas=replicas)


class NatsBus:
    """``replicas``: copies of the buckets this bus creates (``NOETL_REPLICAS`` when None)."""

    def __init__(self, nc: NATS, *, replicas: int | None = None) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.replicas = replicas

    @classmethod
    def of(cls, js: JetStreamContext, *, replicas: int | None = None) -> NatsBus:
        """The bus of a JetStream context callers already hold."""
        return cls(js._nc, replicas=replicas)

    async def add_stream(self, config: StreamConfig) -> None:
        cfg = NatsStreamConfig(
            name=config.name,
            subjects=list(config.subjects),
            retention=RetentionPolicy.WORK_QUEUE if config.work_queue else RetentionPolicy.LIMITS,
            duplicate_window=config.duplicate_window,
            storage=StorageType.FILE,
        )
        try:
            await self.js.add_stream(cfg)
        except BadRequestError:
            await self.js.update_stream(cfg)

    async def publish(self, subject: str, data: bytes, *, msg_id: str | None = None) -> PubAck:
        headers = {"Nats-Msg-Id": msg_id} if msg_id is not None else None
        try:
            ack = await self.js.publish(subject, data, headers=headers)
        except (NoStreamResponseError, nats.errors.NoRespondersError) as e:
            raise NoStreamError(f"no stream takes subject {subject}") from e
        return PubAck(ack.seq, duplicate=bool(ack.duplicate))

    async def _consumer(self, stream: str, filters: list[str], start_seq: int) -> tuple[str, int]:
        cfg = ConsumerConfig(
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start_seq > 1 else DeliverPolicy.ALL,
            opt_start_seq=start_seq if start_seq > 1 else None,
        )
        if len(filters) == 1:
            cfg.filter_subject = filters[0]
        else:
            cfg.filter_subjects = filters
        try:
            info = await self.js.add_consumer(stream, cfg)
        except NotFoundError as e:
            raise NoStreamError(f"stream {stream} not found") from e
        except BadRequestError as e:  # e.g. a reader without acks on a work-queue stream
            raise BusError(f"stream {stream}: {e.description}") from e
        return info.name, info.num_pending or 0

    async def read(
        self, stream: str, filters: list[str], *, start_seq: int = 1, before_seq: int | None = None
    ) -> list[Message]:
        name, remaining = await self._consumer(stream, filters, start_seq)
        out: list[Message] = []
        try:
            if remaining:
                sub = await self.js.pull_subscribe_bind(consumer=name, stream=stream)
                try:
                    while remaining > 0:
                        for m in await sub.fetch(min(remaining, 512), timeout=10):
                            remaining -= 1
                            seq = m.metadata.sequence.stream
                            if before_seq is not None and seq >= before_seq:
                                remaining = 0
                                break
                            out.append(Message(m.subject, m.data, seq))
                finally:
                    await sub.unsubscribe()
        finally:
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(stream, name)
        return out

    async def follow(self, stream: str, filters: list[str], *, start_seq: int = 1) -> AsyncIterator[Message]:
        name, _ = await self._consumer(stream, filters, start_seq)
        sub = await self.js.pull_subscribe_bind(consumer=name, stream=stream)
        try:
            while True:
                try:
                    msgs = await sub.fetch(256, timeout=1.0)
                except nats.errors.TimeoutError:
                    continue
                for m in msgs:
                    yield Message(m.subject, m.data, m.metadata.sequence.stream)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(stream, name)

    async def last(self, stream: str, subject: str) -> Message | None:
        try:
            m = await self.js.get_last_msg(stream, subject)
        except NotFoundError:
            return None
        return Message(m.subject or subject, m.data or b"", m.seq or 0)

    async def count(self, stream: str) -> int:
        info = await self.js.stream_info(stream)
        return int(info.state.messages)

    async def purge(self, stream: str, subject: str | None = None) -> None:
        await self.js.purge_stream(stream, subject=subject)

    async def queue(self, config: QueueConfig) -> _NatsQueue:
        """A durable pull consumer read through ``Puller``: a pull request is always waiting, so
        a command reaches a free worker without a round trip (the hot path's floor)."""
        cfg = ConsumerConfig(
            durable_name=config.consumer,
            filter_subject=config.filter,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=config.ack_wait,
            max_deliver=config.max_deliver,
            max_ack_pending=-1,
        )
        await retrying(lambda: ensure_consumer(self.js, config.stream, cfg), f"consumer {config.consumer}")
        return _NatsQueue(await Puller(self.nc, config.stream, config.consumer).start())

    async def prepare(self, replicas: int | None = None) -> None:
        await ensure_all(self.js, replicas if replicas is not None else self.replicas)

    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> Any:
        async def on_msg(m: Any) -> None:
            await cb(Message(m.subject, m.data, 0))

        return await self.nc.subscribe(subject, cb=on_msg)

    def outbox(self, *, ack_all: bool = False) -> Outbox:
        return Outbox(self.nc, ack_all=ack_all)

    async def kv(self, bucket: str, *, ttl: float | None = None, history: int = 1) -> _NatsKeyValue:
        kv = await ensure_kv(self.js, bucket, ttl=ttl, history=history, replicas=self.replicas)
        return _NatsKeyValue(kv, self.nc, bucket)

    async def objects(self, bucket: str) -> _NatsObjects:
        return _NatsObjects(await ensure_object_store(self.js, bucket, replicas=self.replicas))


class _NatsDelivery:
    def __init__(self, msg: Any) -> None:
        self._msg = msg
        self.subject, self.data = msg.subject, msg.data
        self.seq = msg.metadata.sequence.stream
        self.delivered = msg.metadata.num_delivered

    async def ack(self) -> None:
        """Acknowledged and confirmed (elections and reconnects waited out, ``ack_stored``)."""
        await ack_stored(self._msg, f"acknowledging message {self.seq}")

    async def nak(self, delay: float = 0.0) -> None:
        await self._msg.nak(delay=delay or None)

    async def in_progress(self) -> None:
        await self._msg.in_progress()

    async def term(self) -> None:
        await self._msg.term()


class _NatsQueue:
    def __init__(self, puller: Puller) -> None:
        self._puller = puller

    async def fetch(self, batch: int, timeout: float) -> list[_NatsDelivery]:
        return [_NatsDelivery(m) for m in await self._puller.fetch(batch, wait=max(timeout, 0.01))]

    async def close(self, *, nak: bool = True) -> None:
        await self._puller.stop(nak=nak)


class _NatsKeyValue:
    def __init__(self, kv: Any, nc: NATS | None = None, bucket: str = "") -> None:
        self._kv, self._nc, self._bucket = kv, nc, bucket

    async def get(self, key: str) -> Entry | None:
        try:
            e = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return Entry(key, e.value or b"", e.revision or 0)

    async def put(self, key: str, value: bytes) -> int:
        return int(await self._kv.put(key, value))

    async def create(self, key: str, value: bytes) -> int:
        try:
            return int(await self._kv.create(key, value))
        except KeyWrongLastSequenceError as e:
            raise KeyExistsError(f"key {key} exists") from e

    async def update(self, key: str, value: bytes, last: int) -> int:
        try:
            return int(await self._kv.update(key, value, last=last))
        except KeyWrongLastSequenceError as e:
            raise RevisionMismatchError(f"key {key}: revision {last} is not the last one") from e

    async def delete(self, key: str) -> None:
        with contextlib.suppress(KeyNotFoundError):
            await self._kv.purge(key)  # every revision: a deleted value must not stay in history

    async def put_nowait(self, key: str, value: bytes) -> None:
        # a KV put is a publish to $KV.<bucket>.<key>; without a reply nobody waits for it
        assert self._nc is not None
        await self._nc.publish(kv_subject(self._bucket, key), value)

    async def keys(self, prefix: str = "") -> list[str]:
        try:
            keys = await self._kv.keys()
        except Exception as e:  # nats-py raises NoKeysError for an empty bucket
            if type(e).__name__ == "NoKeysError":
                return []
            raise
        return sorted(k for k in keys if k.startswith(prefix))


class _NatsObjects:
    def __init__(self, store: Any) -> None:
        self._store = store

    async def put(self, name: str, data: bytes) -> None:
        await self._store.put(name, data)

    async def get(self, name: str) -> bytes | None:
        buf = io.BytesIO()  # writeinto: nats-py's plain get is quadratic in the object's size
        try:
            await self._store.get(name, writeinto=buf)
        except (ObjectNotFoundError, NotFoundError):
            return None
        return buf.getvalue()
