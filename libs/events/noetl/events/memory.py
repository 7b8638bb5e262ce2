"""The in-memory twin of the bus (``noetl.events.port``): JetStream's semantics in one process.

For behaviour tests only: nothing survives the process, and there is one copy of everything, so
it proves no guarantee about failures (the fault and cluster tests use real nats-servers). Time
comes from ``clock`` (seconds, monotonic) so tests can move it: duplicate windows, ack waits,
``nak`` delays and key TTLs all read it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

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
    subject_matches,
)


class _Stream:
    def __init__(self, config: StreamConfig) -> None:
        self.config = config
        self.messages: dict[int, Message] = {}  # by sequence, in order
        self.last_seq = 0
        self.seen: dict[str, tuple[int, float]] = {}  # msg_id -> (seq, stored at)

    def takes(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.config.subjects)


class MemoryBus:
    """One process's JetStream: streams, work queues, key-value buckets and object stores."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._streams: dict[str, _Stream] = {}
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._kv: dict[str, _KeyValue] = {}
        self._objects: dict[str, _Objects] = {}
        self._changed = asyncio.Event()  # set on every store; readers that follow wait on it
        self._subs: list[_Subscription] = []
        self._delivering: set[asyncio.Task[None]] = set()

    # --- streams --------------------------------------------------------------------------

    async def prepare(self, replicas: int | None = None) -> None:
        """The deployment's streams as ``noetl.events.streams`` declares them for NATS."""
        from nats.js.api import RetentionPolicy

        from noetl.events.streams import stream_configs

        for cfg in stream_configs(1):
            await self.add_stream(
                StreamConfig(
                    cfg.name or "",
                    tuple(cfg.subjects or ()),
                    work_queue=cfg.retention == RetentionPolicy.WORK_QUEUE,
                    duplicate_window=float(cfg.duplicate_window or 120.0),
                )
            )

    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> _Subscription:
        sub = _Subscription(self, subject, cb)
        self._subs.append(sub)
        return sub

    def outbox(self, *, ack_all: bool = False) -> _Outbox:
        return _Outbox(self)

    async def add_stream(self, config: StreamConfig) -> None:
        if config.name in self._streams:
            self._streams[config.name].config = config
        else:
            self._streams[config.name] = _Stream(config)

    def _stream(self, name: str) -> _Stream:
        try:
            return self._streams[name]
        except KeyError:
            raise NoStreamError(f"stream {name} not found") from None

    async def publish(self, subject: str, data: bytes, *, msg_id: str | None = None) -> PubAck:
        stream = next((st for st in self._streams.values() if st.takes(subject)), None)
        if stream is None:
            raise NoStreamError(f"no stream takes subject {subject}")
        now = self.clock()
        if msg_id is not None:
            known = stream.seen.get(msg_id)
            if known is not None and now - known[1] < stream.config.duplicate_window:
                return PubAck(known[0], duplicate=True)
        stream.last_seq += 1
        message = stream.messages[stream.last_seq] = Message(subject, bytes(data), stream.last_seq)
        if msg_id is not None:
            stream.seen[msg_id] = (stream.last_seq, now)
        self._wake()
        for sub in self._subs:
            if subject_matches(sub.subject, subject):
                task = asyncio.create_task(sub.cb(message))  # as NATS: the publisher does not wait
                self._delivering.add(task)
                task.add_done_callback(self._delivering.discard)
        await asyncio.sleep(0)  # a publish is I/O: let others run, as they would on NATS
        return PubAck(stream.last_seq)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def read(
        self, stream: str, filters: list[str], *, start_seq: int = 1, before_seq: int | None = None
    ) -> list[Message]:
        st = self._stream(stream)
        if st.config.work_queue:
            raise BusError(f"stream {stream} is a work queue: read it through a queue")
        return [
            m
            for seq, m in list(st.messages.items())
            if seq >= start_seq
            and (before_seq is None or seq < before_seq)
            and any(subject_matches(f, m.subject) for f in filters)
        ]

    async def follow(self, stream: str, filters: list[str], *, start_seq: int = 1) -> AsyncIterator[Message]:
        nxt = start_seq
        while True:
            changed = self._changed
            found = await self.read(stream, filters, start_seq=nxt)
            for m in found:
                nxt = m.seq + 1
                yield m
            if not found:
                await changed.wait()

    async def last(self, stream: str, subject: str) -> Message | None:
        found = await self.read(stream, [subject])
        return found[-1] if found else None

    async def count(self, stream: str) -> int:
        return len(self._stream(stream).messages)

    async def purge(self, stream: str, subject: str | None = None) -> None:
        st = self._stream(stream)
        gone = [s for s, m in st.messages.items() if subject is None or subject_matches(subject, m.subject)]
        for seq in gone:
            del st.messages[seq]

    # --- work queues ------------------------------------------------------------------------

    async def queue(self, config: QueueConfig) -> _Queue:
        key = (config.stream, config.consumer)
        if key not in self._queues:
            self._queues[key] = _Queue(self, self._stream(config.stream), config)
        return self._queues[key]

    # --- key-value and objects ----------------------------------------------------------------

    async def kv(self, bucket: str, *, ttl: float | None = None, history: int = 1) -> _KeyValue:
        if bucket not in self._kv:
            self._kv[bucket] = _KeyValue(self, ttl)
        return self._kv[bucket]

    async def objects(self, bucket: str) -> _Objects:
        return self._objects.setdefault(bucket, _Objects())


class _Subscription:
    def __init__(self, bus: MemoryBus, subject: str, cb: Callable[[Message], Awaitable[None]]) -> None:
        self.bus, self.subject, self.cb = bus, subject, cb

    async def unsubscribe(self) -> None:
        if self in self.bus._subs:
            self.bus._subs.remove(self)


class _Outbox:
    """Every message is stored when sent: nothing is left to confirm."""

    def __init__(self, bus: MemoryBus) -> None:
        self.bus = bus

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        await self.bus.publish(subject, data, msg_id=msg_id)

    async def confirm(self) -> None:
        return None


@dataclass
class _Pending:
    delivered: int = 0
    due: float = 0.0  # when it may be handed out (again)
    out: bool = False  # handed out and not answered
    done: bool = False  # acknowledged or terminated


class _Delivery:
    def __init__(self, queue: _Queue, message: Message, delivered: int) -> None:
        self._queue, self.subject, self.data, self.seq = queue, message.subject, message.data, message.seq
        self.delivered = delivered

    async def ack(self) -> None:
        self._queue.answer(self.seq, done=True)

    async def nak(self, delay: float = 0.0) -> None:
        self._queue.answer(self.seq, done=False, delay=delay)

    async def in_progress(self) -> None:
        self._queue.extend(self.seq)

    async def term(self) -> None:
        self._queue.answer(self.seq, done=True)


class _Queue:
    def __init__(self, bus: MemoryBus, stream: _Stream, config: QueueConfig) -> None:
        self.bus, self.stream, self.config = bus, stream, config
        self.state: dict[int, _Pending] = {}

    def _ready(self, now: float) -> list[Message]:
        out = []
        for seq, m in list(self.stream.messages.items()):
            if not subject_matches(self.config.filter, m.subject):
                continue
            p = self.state.setdefault(seq, _Pending())
            if p.done or now < p.due:  # answered, or out / naked until its due time
                continue
            if self.config.max_deliver >= 0 and p.delivered >= self.config.max_deliver:
                continue
            out.append(m)
        return out

    async def fetch(self, batch: int, timeout: float) -> list[_Delivery]:
        deadline = self.bus.clock() + timeout
        while True:
            now = self.bus.clock()
            ready = self._ready(now)[:batch]
            if ready:
                out = []
                for m in ready:
                    p = self.state[m.seq]
                    p.delivered += 1
                    p.out, p.due = True, now + self.config.ack_wait
                    out.append(_Delivery(self, m, p.delivered))
                return out
            if now >= deadline:
                return []
            changed = self.bus._changed
            wake = min([deadline, *(p.due for p in self.state.values() if not p.done and p.due > now)])
            try:
                await asyncio.wait_for(changed.wait(), max(0.001, min(wake - now, 0.05)))
            except TimeoutError:
                pass

    def answer(self, seq: int, *, done: bool, delay: float = 0.0) -> None:
        p = self.state.setdefault(seq, _Pending())
        p.out = False
        if done:
            p.done = True
            if self.stream.config.work_queue:  # acked or terminated: JetStream removes it
                self.stream.messages.pop(seq, None)
        else:
            p.due = self.bus.clock() + delay
        self.bus._wake()

    async def close(self, *, nak: bool = True) -> None:
        if nak:
            now = self.bus.clock()
            for p in self.state.values():
                if p.out and not p.done:
                    p.out, p.due = False, now
            self.bus._wake()

    def extend(self, seq: int) -> None:
        p = self.state.get(seq)
        if p is not None and p.out:
            p.due = self.bus.clock() + self.config.ack_wait


class _KeyValue:
    def __init__(self, bus: MemoryBus, ttl: float | None) -> None:
        self.bus, self.ttl = bus, ttl
        self.revision = 0
        self.entries: dict[str, tuple[Entry, float]] = {}  # key -> (entry, written at)

    def _live(self, key: str) -> Entry | None:
        got = self.entries.get(key)
        if got is None:
            return None
        entry, at = got
        if self.ttl is not None and self.bus.clock() - at >= self.ttl:
            del self.entries[key]
            return None
        return entry

    def _write(self, key: str, value: bytes) -> int:
        self.revision += 1
        self.entries[key] = (Entry(key, bytes(value), self.revision), self.bus.clock())
        self.bus._wake()
        return self.revision

    async def get(self, key: str) -> Entry | None:
        return self._live(key)

    async def put(self, key: str, value: bytes) -> int:
        return self._write(key, value)

    async def create(self, key: str, value: bytes) -> int:
        if self._live(key) is not None:
            raise KeyExistsError(f"key {key} exists")
        return self._write(key, value)

    async def update(self, key: str, value: bytes, last: int) -> int:
        entry = self._live(key)
        if entry is None or entry.revision != last:
            have = entry.revision if entry else 0
            raise RevisionMismatchError(f"key {key}: revision {last} is not the last one ({have})")
        return self._write(key, value)

    async def delete(self, key: str) -> None:
        self.entries.pop(key, None)
        self.revision += 1

    async def keys(self, prefix: str = "") -> list[str]:
        return sorted(k for k in list(self.entries) if k.startswith(prefix) and self._live(k) is not None)

    async def put_nowait(self, key: str, value: bytes) -> None:
        self._write(key, value)


@dataclass
class _Objects:
    data: dict[str, bytes] = field(default_factory=dict)

    async def put(self, name: str, data: bytes) -> None:
        self.data[name] = bytes(data)

    async def get(self, name: str) -> bytes | None:
        return self.data.get(name)
