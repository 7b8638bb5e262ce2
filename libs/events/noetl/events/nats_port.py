"""The bus port (``noetl.events.port``) over a real nats-server, with nats-py.

Each operation maps to the JetStream call that has the promised semantics: a publish with
``Nats-Msg-Id`` (dedupe in the stream's window), ephemeral consumers without acks for reads,
durable pull consumers with explicit acks for work queues, KV buckets and object stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
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
    APIError,
    BadRequestError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    NotFoundError,
    ObjectNotFoundError,
)

from noetl.events.outbox import Outbox
from noetl.events.port import (
    Bus,
    BusError,
    Delivery,
    Entry,
    KeyExistsError,
    Message,
    NoStreamError,
    PubAck,
    QueueConfig,
    ReaderLostError,
    RefusedError,
    RevisionMismatchError,
    StreamConfig,
    UnavailableError,
)
from noetl.events.puller import Puller, PullError, ack_stored, consumer_sequence
from noetl.events.retry import describe, is_transient, retrying
from noetl.events.streams import ensure_all, ensure_consumer, ensure_kv, ensure_object_store
from noetl.events.subjects import consumer_delete_subject, kv_subject

log = logging.getLogger("noetl.events")

# an idle reader asks this often whether its consumer still exists (its node may be gone)
_READER_CHECK_EVERY = 3.0


def as_bus(conn: Any, *, replicas: int | None = None) -> Bus:
    """The bus port (``noetl.events.port``) of what a caller holds: a bus as it is (``NatsBus``
    or the in-memory twin), a nats-py connection or JetStream context wrapped in a ``NatsBus``.
    The one place that tells them apart, so services and stores accept either."""
    if hasattr(conn, "queue") and hasattr(conn, "outbox"):
        bus: Bus = conn
        return bus
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
            allow_msg_schedules=config.schedules or None,
            allow_rollup_hdrs=config.schedules,
        )
        try:
            await self.js.add_stream(cfg)
        except BadRequestError:
            await self.js.update_stream(cfg)

    async def publish(
        self, subject: str, data: bytes, *, msg_id: str | None = None, headers: dict[str, str] | None = None
    ) -> PubAck:
        hdrs = dict(headers or {})
        if msg_id is not None:
            hdrs["Nats-Msg-Id"] = msg_id
        try:
            ack = await self.js.publish(subject, data, headers=hdrs or None)
        except (NoStreamResponseError, nats.errors.NoRespondersError) as e:
            raise NoStreamError(f"no stream takes subject {subject}") from e
        except Exception as e:
            if never_storable(e):
                raise RefusedError(f"{subject}: {e}") from e
            raise
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
                            out.append(_message(m))
                finally:
                    await sub.unsubscribe()
        finally:
            with contextlib.suppress(Exception):
                await self.js.delete_consumer(stream, name)
        return out

    async def follow(
        self, stream: str, filters: list[str], *, start_seq: int = 1
    ) -> AsyncGenerator[Message, None]:
        """Over ``reader``: a consumer lost with a node, a restart or a long disconnect (or a
        message lost on the way) is noticed, and a new one goes on after the last message given."""
        nxt = start_seq
        while True:
            reader = await self.reader(stream, filters, start_seq=nxt)
            try:
                while True:
                    try:
                        msgs = await reader.fetch(256, 1.0)
                    except ReaderLostError:
                        break
                    for m in msgs:
                        nxt = m.seq + 1
                        yield m
            finally:
                await reader.close()

    async def reader(
        self, stream: str, filters: list[str], *, start_seq: int = 1, name: str = ""
    ) -> _NatsReader:
        """An ordered reader of its own: a consumer without acks (the caller's checkpoint is the
        acknowledgement) in memory, one replica, from ``start_seq``; gaps in its consumer sequence
        and a consumer gone with its node end it (``ReaderLostError``)."""
        cfg = ConsumerConfig(
            name=name or None,
            ack_policy=AckPolicy.NONE,
            filter_subjects=filters,
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start_seq,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=30.0,
        )
        info = await retrying(lambda: self.js.add_consumer(stream, cfg), f"{stream}: reader")
        puller = await Puller(self.nc, stream, info.name, batch=256).start()
        return _NatsReader(self, stream, info.name, puller)

    async def last(self, stream: str, subject: str) -> Message | None:
        try:
            m = await self.js.get_last_msg(stream, subject)
        except NotFoundError:
            return None
        return Message(m.subject or subject, m.data or b"", m.seq or 0, dict(m.headers or {}) or None)

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

    def outbox(self, *, ack_all: bool = False, confirm_every: int | None = 64) -> _NatsOutbox:
        return _NatsOutbox(Outbox(self.nc, ack_all=ack_all, confirm_every=confirm_every))

    async def kv(self, bucket: str, *, ttl: float | None = None, history: int = 1) -> _NatsKeyValue:
        kv = await ensure_kv(self.js, bucket, ttl=ttl, history=history, replicas=self.replicas)
        if ttl is not None:
            # a bucket another process has just created may not show on our node for a moment
            await retrying(
                lambda: self._settle_ttl(bucket, ttl), f"setting the TTL of {bucket}", also=(NotFoundError,)
            )
        return _NatsKeyValue(kv, self.nc, bucket, self.js)

    async def _settle_ttl(self, bucket: str, ttl: float) -> None:
        info = await self.js.stream_info(f"KV_{bucket}")
        if info.config.max_age and abs(info.config.max_age - ttl) > 0.01:
            log.warning("KV bucket %s: TTL %.1f s, changing it to %.1f s", bucket, info.config.max_age, ttl)
            await self.js.update_stream(info.config.evolve(max_age=ttl, duplicate_window=ttl))

    async def objects(self, bucket: str) -> _NatsObjects:
        return _NatsObjects(await ensure_object_store(self.js, bucket, replicas=self.replicas))


_STREAM_NOT_FOUND = 10059  # nats-server's JSStreamNotFoundErr


def port_error(e: BaseException) -> BusError | None:
    """The port's error for a failure of nats-py (None when ``e`` is not one): the adapter's
    translation, so that what crosses the port is ``noetl.events.port``'s family and nats-py's
    classes and JetStream's error codes are read here alone. ``__cause__`` keeps the original.

    Passing by itself (``is_transient``: time-outs, no responders, a reconnect, no leader) is
    ``UnavailableError``; a message that can never be stored is ``RefusedError``; a stream that
    is not there ``NoStreamError``; any other nats-py failure a plain ``BusError``.
    """
    if isinstance(e, BusError):
        return e
    if not isinstance(e, nats.errors.Error | APIError | TimeoutError):
        return None
    out: BusError
    text = describe(e)
    if is_transient(e):
        out = UnavailableError(text)
    elif never_storable(e):
        out = RefusedError(text)
    elif isinstance(e, NotFoundError) and e.err_code == _STREAM_NOT_FOUND:
        out = NoStreamError(text)
    else:
        out = BusError(text)
    out.__cause__ = e
    return out


def never_storable(e: BaseException) -> bool:
    """Refusals of the message itself, never of the moment: a payload over ``max_payload``, a bad
    subject, a stream answering 400 (e.g. message size exceeds the stream's maximum). Anything
    else might pass with time and is retried."""
    if isinstance(e, nats.errors.MaxPayloadError | nats.errors.BadSubjectError):
        return True
    return isinstance(e, APIError) and e.code == 400 and not is_transient(e)


def _stamp(m: Any) -> float:
    ts = getattr(getattr(m, "metadata", None), "timestamp", None)
    return ts.timestamp() if ts is not None else 0.0


def _message(m: Any) -> Message:
    return Message(m.subject, m.data, m.metadata.sequence.stream, dict(m.headers or {}) or None, _stamp(m))


class _NatsOutbox:
    """``Outbox`` with the port's errors: a message JetStream can never store is ``RefusedError``."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        try:
            await self._outbox.send(subject, data, msg_id, ack=ack)
        except Exception as e:
            if never_storable(e):
                raise RefusedError(f"{subject}: {e}") from e
            raise

    async def confirm(self) -> None:
        try:
            await self._outbox.confirm()
        except Exception as e:
            if never_storable(e):
                raise RefusedError(str(e)) from e
            raise


class _NatsReader:
    def __init__(self, bus: NatsBus, stream: str, name: str, puller: Puller) -> None:
        self._bus, self._stream, self._name, self._puller = bus, stream, name, puller
        self._expected = 1  # the next consumer sequence: any other is a message lost on the way
        self._gap = False
        self._idle_since: float | None = None

    async def fetch(self, batch: int, timeout: float) -> list[Message]:
        if self._gap:
            raise ReaderLostError(f"{self._stream}: a message lost on the way to reader {self._name}")
        loop = asyncio.get_running_loop()
        try:
            msgs = await self._puller.fetch(batch, wait=timeout)
        except PullError as e:  # its consumer deleted, its pull refused: this reader is done
            raise ReaderLostError(f"{self._stream}: reader {self._name}: {e}") from e
        if not msgs:
            self._idle_since = self._idle_since or loop.time()
            if loop.time() - self._idle_since >= _READER_CHECK_EVERY:
                self._idle_since = loop.time()
                try:
                    await self._bus.js.consumer_info(self._stream, self._name, timeout=2.0)
                except NotFoundError as e:
                    raise ReaderLostError(f"{self._stream}: reader {self._name} is gone") from e
                except Exception as e:
                    if not is_transient(e):
                        raise
            return []
        self._idle_since = None
        out = []
        for m in msgs:
            if consumer_sequence(m) != self._expected:
                self._gap = True  # never past a gap: what came before it is handed over first
                break
            self._expected += 1
            out.append(_message(m))
        if not out:
            raise ReaderLostError(f"{self._stream}: a message lost on the way to reader {self._name}")
        return out

    async def close(self) -> None:
        await self._puller.stop()
        with contextlib.suppress(Exception):
            await self._bus.nc.publish(consumer_delete_subject(self._stream, self._name), b"")


class _NatsDelivery:
    def __init__(self, msg: Any) -> None:
        self._msg = msg
        self.subject, self.data = msg.subject, msg.data
        self.seq = msg.metadata.sequence.stream
        self.delivered = msg.metadata.num_delivered
        self.headers = dict(msg.headers or {}) or None
        self.stamp = _stamp(msg)

    @property
    def msg_id(self) -> str | None:
        return (self.headers or {}).get("Nats-Msg-Id")

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

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        return [_NatsDelivery(m) for m in await self._puller.fetch(batch, wait=max(timeout, 0.01))]

    async def close(self, *, nak: bool = True) -> None:
        await self._puller.stop(nak=nak)


class _NatsKeyValue:
    def __init__(self, kv: Any, nc: NATS | None = None, bucket: str = "", js: Any = None) -> None:
        self._kv, self._nc, self._bucket, self._js = kv, nc, bucket, js

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
        except (KeyWrongLastSequenceError, KeyNotFoundError) as e:
            # refused; nats-py then reads the key back, which a node that has not applied the
            # other writer's create yet answers with "not found": it exists all the same
            raise KeyExistsError(f"key {key} exists") from e

    async def update(self, key: str, value: bytes, last: int) -> int:
        try:
            return int(await self._kv.update(key, value, last=last))
        except KeyWrongLastSequenceError as e:
            raise RevisionMismatchError(f"key {key}: revision {last} is not the last one") from e

    async def delete(self, key: str, *, last: int | None = None) -> None:
        if last is None:
            with contextlib.suppress(KeyNotFoundError):
                await self._kv.purge(key)  # every revision: a deleted value must not stay in history
            return
        # a purge (every revision gone) only while ``last`` is the key's last revision
        headers = {
            "KV-Operation": "PURGE",
            "Nats-Rollup": "sub",
            "Nats-Expected-Last-Subject-Sequence": str(last),
        }
        try:
            await self._js.publish(kv_subject(self._bucket, key), b"", headers=headers)
        except APIError as e:
            if e.err_code in (10071, 10164):
                raise RevisionMismatchError(f"key {key}: revision {last} is not the last one") from e
            raise

    async def purge(self, pattern: str) -> None:
        await self._js.purge_stream(f"KV_{self._bucket}", subject=kv_subject(self._bucket, pattern))

    async def ttl(self) -> float | None:
        info = await self._js.stream_info(f"KV_{self._bucket}")
        return info.config.max_age or None

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
