"""The in-memory twin of the bus (``noetl.events.port``): JetStream's semantics in one process.

For behaviour tests only: nothing survives the process, and there is one copy of everything, so
it proves no guarantee about failures (the fault and cluster tests use real nats-servers). Time
comes from ``clock`` (seconds, monotonic) so tests can move it: duplicate windows, ack waits,
``nak`` delays and key TTLs all read it.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import AsyncGenerator, Awaitable, Callable

from noetl.events.memory_handles import _KeyValue, _Objects, _Queue
from noetl.events.memory_schedules import Schedules
from noetl.events.port import (
    BusError,
    BusRefusedError,
    Message,
    NoStreamError,
    PubAck,
    QueueConfig,
    ReaderLostError,
    StreamConfig,
    subject_matches,
)


class _Stream:
    """Messages by sequence, and the sequences of each subject: a filtered read costs the
    subjects it matches and the messages it returns, not the whole stream (a loop of 20 000
    iterations stores ~80 000 events; every partition reader polls)."""

    def __init__(self, config: StreamConfig) -> None:
        self.config = config
        self.messages: dict[int, Message] = {}  # by sequence, in order
        self.last_seq = 0
        self.seen: dict[str, tuple[int, float]] = {}  # msg_id -> (seq, stored at)
        self.by_subject: dict[str, list[int]] = {}  # ascending; may name removed messages
        self._subjects: list[str] = []  # in the order first seen
        self._matched: dict[tuple[str, ...], tuple[int, list[str]]] = {}  # filters -> (seen, subjects)
        self.waiters: set[_Waiter] = set()  # readers and queues waiting for a message they match

    def takes(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.config.subjects)

    def store(self, message: Message) -> None:
        self.messages[message.seq] = message
        seqs = self.by_subject.get(message.subject)
        if seqs is None:
            seqs = self.by_subject[message.subject] = []
            self._subjects.append(message.subject)
        seqs.append(message.seq)
        for waiter in list(self.waiters):
            if waiter.wants(message.subject):
                waiter.event.set()

    def waiter(self, filters: list[str]) -> _Waiter:
        """Set when a message matching ``filters`` is stored (or ``wake`` is called): waking
        only whom a message concerns keeps a busy stream from waking every reader per message."""
        waiter = _Waiter(filters)
        self.waiters.add(waiter)
        return waiter

    def _matching(self, filters: list[str]) -> list[str]:
        key = tuple(filters)
        seen, found = self._matched.get(key, (0, []))
        for subject in self._subjects[seen:]:
            if any(subject_matches(f, subject) for f in filters):
                found.append(subject)
        if len(self._matched) > 4096:  # one-off filters (an execution's events) come and go
            self._matched.clear()
        self._matched[key] = (len(self._subjects), found)
        return found

    def select(self, filters: list[str], start_seq: int = 1, before_seq: int | None = None) -> list[Message]:
        picked: list[int] = []
        for subject in self._matching(filters):
            seqs = self.by_subject[subject]
            lo = bisect.bisect_left(seqs, start_seq)
            hi = len(seqs) if before_seq is None else bisect.bisect_left(seqs, before_seq)
            picked.extend(seqs[lo:hi])
        picked.sort()
        return [m for m in (self.messages.get(q) for q in picked) if m is not None]

    def newest(self, filters: list[str]) -> Message | None:
        best: Message | None = None
        for subject in self._matching(filters):
            seqs = self.by_subject[subject]
            for q in reversed(seqs):
                m = self.messages.get(q)
                if m is not None:
                    if best is None or m.seq > best.seq:
                        best = m
                    break
        return best


class _Waiter:
    def __init__(self, filters: list[str]) -> None:
        self.filters, self.event = filters, asyncio.Event()
        self._wanted: dict[str, bool] = {}  # by subject: a stream has few distinct subjects

    def wants(self, subject: str) -> bool:
        known = self._wanted.get(subject)
        if known is None:
            if len(self._wanted) > 65536:
                self._wanted.clear()
            known = self._wanted[subject] = any(subject_matches(f, subject) for f in self.filters)
        return known

    async def wait(self, timeout: float) -> None:
        """Until set or ``timeout``; a timer instead of ``wait_for``: no task per wait, and a
        cancel is never lost to a wake-up that comes at the same moment."""
        if not self.event.is_set():
            timer = asyncio.get_running_loop().call_later(timeout, self.event.set)
            try:
                await self.event.wait()
            finally:
                timer.cancel()
        self.event.clear()


class MemoryBus:
    """One process's JetStream: streams, work queues, key-value buckets and object stores."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        wall: Callable[[], float] = time.time,
        max_payload: int = 1024 * 1024,
    ) -> None:
        """``wall``: seconds since the epoch, for message stamps and schedules; ``max_payload``:
        NATS's default limit, over which a publish is refused."""
        self.clock, self.wall, self.max_payload = clock, wall, max_payload
        self._streams: dict[str, _Stream] = {}
        self._taker: dict[str, _Stream] = {}  # subject -> the stream that takes it
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._kv: dict[str, _KeyValue] = {}
        self._objects: dict[str, _Objects] = {}
        self._subs: list[_Subscription] = []
        self._delivering: set[asyncio.Future[None]] = set()
        self._schedules = Schedules(self)  # JetStream message scheduling (``memory_schedules``)

    # --- streams --------------------------------------------------------------------------

    async def prepare(self, replicas: int | None = None) -> None:
        """The deployment's streams as ``noetl.events.streams`` declares them for NATS."""
        from noetl.events.streams import port_stream_configs

        for cfg in port_stream_configs():
            await self.add_stream(cfg)

    async def subscribe(self, subject: str, cb: Callable[[Message], Awaitable[None]]) -> _Subscription:
        sub = _Subscription(self, subject, cb)
        self._subs.append(sub)
        return sub

    def outbox(self, *, ack_all: bool = False, confirm_every: int | None = 64) -> _Outbox:
        return _Outbox(self)

    async def add_stream(self, config: StreamConfig) -> None:
        self._taker.clear()
        if config.name in self._streams:
            self._streams[config.name].config = config
        else:
            self._streams[config.name] = _Stream(config)

    def _stream(self, name: str) -> _Stream:
        try:
            return self._streams[name]
        except KeyError:
            raise NoStreamError(f"stream {name} not found") from None

    async def publish(
        self, subject: str, data: bytes, *, msg_id: str | None = None, headers: dict[str, str] | None = None
    ) -> PubAck:
        if len(data) > self.max_payload:
            raise BusRefusedError(
                f"message of {len(data)} bytes on {subject} is over max_payload {self.max_payload}"
            )
        stream = self._taker.get(subject)
        if stream is None:
            stream = next((st for st in self._streams.values() if st.takes(subject)), None)
            if stream is not None and len(self._taker) < 65536:
                self._taker[subject] = stream
        if stream is None:
            raise NoStreamError(f"no stream takes subject {subject}")
        headers = dict(headers or {})
        if msg_id is not None:
            headers["Nats-Msg-Id"] = msg_id
        headers = self._schedules.admit(stream, subject, headers)
        msg_id = headers.get("Nats-Msg-Id")
        now = self.clock()
        if msg_id is not None:
            known = stream.seen.get(msg_id)
            if known is not None and now - known[1] < stream.config.duplicate_window:
                return PubAck(known[0], duplicate=True)
        stream.last_seq += 1
        message = Message(subject, bytes(data), stream.last_seq, headers or None, self.wall())
        stream.store(message)
        if msg_id is not None:
            stream.seen[msg_id] = (stream.last_seq, now)
        self._schedules.stored(stream, message)
        for sub in self._subs:
            if subject_matches(sub.subject, subject):
                task = asyncio.ensure_future(sub.cb(message))  # as NATS: the publisher does not wait
                self._delivering.add(task)
                task.add_done_callback(self._delivering.discard)
        await asyncio.sleep(0)  # a publish is I/O: let others run, as they would on NATS
        return PubAck(stream.last_seq)

    async def close(self) -> None:
        """Stop firing schedules: their task must not outlive the test or process using the bus."""
        await self._schedules.close()

    async def read(
        self, stream: str, filters: list[str], *, start_seq: int = 1, before_seq: int | None = None
    ) -> list[Message]:
        st = self._stream(stream)
        if st.config.work_queue:
            raise BusError(f"stream {stream} is a work queue: read it through a queue")
        return st.select(filters, start_seq, before_seq)

    async def follow(
        self, stream: str, filters: list[str], *, start_seq: int = 1
    ) -> AsyncGenerator[Message, None]:
        nxt = start_seq
        st = self._stream(stream)
        waiter = st.waiter(filters)
        try:
            while True:
                found = await self.read(stream, filters, start_seq=nxt)
                for m in found:
                    nxt = m.seq + 1
                    yield m
                if not found:
                    await waiter.wait(1.0)
        finally:
            st.waiters.discard(waiter)

    async def reader(self, stream: str, filters: list[str], *, start_seq: int = 1, name: str = "") -> _Reader:
        self._stream(stream)
        return _Reader(self, stream, filters, start_seq)

    async def last(self, stream: str, subject: str) -> Message | None:
        return self._stream(stream).newest([subject])

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
        elif ttl is not None:
            self._kv[bucket].ttl_s = ttl
        return self._kv[bucket]

    async def objects(self, bucket: str) -> _Objects:
        return self._objects.setdefault(bucket, _Objects())


class _Reader:
    def __init__(self, bus: MemoryBus, stream: str, filters: list[str], start_seq: int) -> None:
        self.bus, self.stream, self.filters, self.next = bus, stream, filters, start_seq
        self.lost = False  # tests set it to make the reader fail as a lost NATS consumer would
        self._st = bus._stream(stream)
        self._waiter = self._st.waiter(filters)

    async def fetch(self, batch: int, timeout: float) -> list[Message]:
        deadline = self.bus.clock() + timeout
        while True:
            if self.lost:
                raise ReaderLostError(f"reader of {self.stream} lost")
            self._waiter.event.clear()
            found = (await self.bus.read(self.stream, self.filters, start_seq=self.next))[:batch]
            if found:
                self.next = found[-1].seq + 1
                return found
            left = deadline - self.bus.clock()
            if left <= 0:
                return []
            await self._waiter.wait(min(left, 0.05))  # a test may move the clock

    async def close(self) -> None:
        self._st.waiters.discard(self._waiter)


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
