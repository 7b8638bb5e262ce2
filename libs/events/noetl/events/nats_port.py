"""The bus port (``noetl.events.port``) over a real nats-server, with nats-py.

Each operation maps to the JetStream call that has the promised semantics: a publish with
``Nats-Msg-Id`` (dedupe in the stream's window), ephemeral consumers without acks for reads,
durable pull consumers with explicit acks for work queues, KV buckets and object stores.
"""

from __future__ import annotations

import contextlib
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
    BadRequestError,
    NoStreamResponseError,
    NotFoundError,
)

from noetl.events.nats_errors import never_storable, port_error, ported, translating
from noetl.events.nats_handles import (
    _message,
    _NatsKeyValue,
    _NatsObjects,
    _NatsOutbox,
    _NatsQueue,
    _NatsReader,
)
from noetl.events.outbox import Outbox
from noetl.events.port import (
    BusError,
    BusRefusedError,
    Message,
    NoStreamError,
    PubAck,
    QueueConfig,
    ReaderLostError,
    StreamConfig,
)
from noetl.events.puller import Puller
from noetl.events.retry import retrying
from noetl.events.streams import ensure_all, ensure_consumer, ensure_kv, ensure_object_store, replicas_wanted

log = logging.getLogger("noetl.events")

__all__ = ["NatsBus", "never_storable", "port_error", "translating"]


class NatsBus:
    """The one adapter from nats-py to the port, made where a process is assembled (the CLI, test
    fixtures, the fault and cluster harnesses); everything behind it takes ``Bus``.
    ``replicas``: copies of the buckets this bus creates (``NOETL_REPLICAS`` when None)."""

    def __init__(self, nc: NATS, *, replicas: int | None = None) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.replicas = replicas
        self._prepared: set[int | None] = set()  # the replica counts declared through this bus

    @classmethod
    def of(cls, js: JetStreamContext, *, replicas: int | None = None) -> NatsBus:
        """The bus of a JetStream context callers already hold."""
        return cls(js._nc, replicas=replicas)

    @ported
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

    @ported
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
                raise BusRefusedError(f"{subject}: {e}") from e
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

    @ported
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
                        msgs = await reader.fetch(256, 1.0)  # both ported: the port's errors only
                    except ReaderLostError:
                        break
                    for m in msgs:
                        nxt = m.seq + 1
                        yield m
            finally:
                await reader.close()

    @ported
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

    @ported
    async def last(self, stream: str, subject: str) -> Message | None:
        try:
            m = await self.js.get_last_msg(stream, subject)
        except NotFoundError:
            return None
        return Message(m.subject or subject, m.data or b"", m.seq or 0, dict(m.headers or {}) or None)

    @ported
    async def count(self, stream: str) -> int:
        info = await self.js.stream_info(stream)
        return int(info.state.messages)

    @ported
    async def purge(self, stream: str, subject: str | None = None) -> None:
        await self.js.purge_stream(stream, subject=subject)

    @ported
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

    @ported
    async def prepare(self, replicas: int | None = None) -> None:
        """Every stream and bucket, declared once per bus: the parts of one process that share
        it (``noetl run``'s server and worker) found them already declared, and their second and
        third declarations were ~20 round trips of its start-up each."""
        want = replicas_wanted(replicas if replicas is not None else self.replicas)
        if want in self._prepared:
            return
        await ensure_all(self.js, want)
        self._prepared.add(want)

    @ported
    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> Any:
        async def on_msg(m: Any) -> None:
            await cb(Message(m.subject, m.data, 0))

        return await self.nc.subscribe(subject, cb=on_msg)

    def outbox(self, *, ack_all: bool = False, confirm_every: int | None = 64) -> _NatsOutbox:
        return _NatsOutbox(Outbox(self.nc, ack_all=ack_all, confirm_every=confirm_every))

    @ported
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

    @ported
    async def objects(self, bucket: str) -> _NatsObjects:
        return _NatsObjects(await ensure_object_store(self.js, bucket, replicas=self.replicas))


