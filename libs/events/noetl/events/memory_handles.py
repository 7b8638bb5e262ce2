"""The in-memory twin's work queues, key-value buckets and object stores (``noetl.events.memory``
holds the bus and its streams): JetStream's semantics for deliveries (ack wait, ``nak`` delays,
``max_deliver``), revisions and TTLs, in one process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from noetl.events.port import (
    Delivery,
    Entry,
    KeyExistsError,
    Message,
    QueueConfig,
    RevisionMismatchError,
    subject_matches,
)

if TYPE_CHECKING:
    from noetl.events.memory import MemoryBus, _Stream


@dataclass
class _Pending:
    delivered: int = 0
    due: float = 0.0  # when it may be handed out (again)
    out: bool = False  # handed out and not answered


class _Delivery:
    def __init__(self, queue: _Queue, message: Message, delivered: int) -> None:
        self._queue, self.subject, self.data, self.seq = queue, message.subject, message.data, message.seq
        self.headers, self.stamp = message.headers, message.stamp
        self.delivered = delivered

    @property
    def msg_id(self) -> str | None:
        return (self.headers or {}).get("Nats-Msg-Id")

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
        self.state: dict[int, _Pending] = {}  # messages seen and not answered for good
        self.done: set[int] = set()  # answered for good, from ``floor`` on (a stream that keeps them)
        self.floor = 1  # every message before it is answered
        self._waiter = stream.waiter([config.filter])  # for as long as the bus lives, as a durable

    def _ready(self, now: float) -> list[Message]:
        out = []
        floor = None
        for m in self.stream.select([self.config.filter], self.floor):
            if m.seq in self.done:
                continue
            p = self.state.setdefault(m.seq, _Pending())
            floor = m.seq if floor is None else floor
            if now < p.due:  # out, or naked until its due time
                continue
            if self.config.max_deliver >= 0 and p.delivered >= self.config.max_deliver:
                continue
            out.append(m)
        self.floor = floor if floor is not None else self.stream.last_seq + 1
        self.done = {q for q in self.done if q >= self.floor}
        return out

    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        deadline = self.bus.clock() + timeout
        while True:
            now = self.bus.clock()
            ready = self._ready(now)[:batch]
            if ready:
                out: list[Delivery] = []
                for m in ready:
                    p = self.state[m.seq]
                    p.delivered += 1
                    p.out, p.due = True, now + self.config.ack_wait
                    out.append(_Delivery(self, m, p.delivered))
                return out
            if now >= deadline:
                return []
            wake = min([deadline, *(p.due for p in self.state.values() if p.due > now)])
            await self._waiter.wait(max(0.001, min(wake - now, 0.05)))

    def answer(self, seq: int, *, done: bool, delay: float = 0.0) -> None:
        p = self.state.setdefault(seq, _Pending())
        p.out = False
        if done:
            del self.state[seq]
            if self.stream.config.work_queue:  # acked or terminated: JetStream removes it
                self.stream.messages.pop(seq, None)
            else:
                self.done.add(seq)
        else:
            p.due = self.bus.clock() + delay
        self._wake()

    def _wake(self) -> None:
        self._waiter.event.set()

    async def close(self, *, nak: bool = True) -> None:
        if nak:
            now = self.bus.clock()
            for p in self.state.values():
                if p.out:
                    p.out, p.due = False, now
            self._wake()

    def extend(self, seq: int) -> None:
        p = self.state.get(seq)
        if p is not None and p.out:
            p.due = self.bus.clock() + self.config.ack_wait


class _KeyValue:
    def __init__(self, bus: MemoryBus, ttl: float | None) -> None:
        self.bus, self.ttl_s = bus, ttl
        self.revision = 0
        self.entries: dict[str, tuple[Entry, float]] = {}  # key -> (entry, written at)

    def _live(self, key: str) -> Entry | None:
        got = self.entries.get(key)
        if got is None:
            return None
        entry, at = got
        if self.ttl_s is not None and self.bus.clock() - at >= self.ttl_s:
            del self.entries[key]
            return None
        return entry

    def _write(self, key: str, value: bytes) -> int:
        self.revision += 1
        self.entries[key] = (Entry(key, bytes(value), self.revision), self.bus.clock())
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

    async def delete(self, key: str, *, last: int | None = None) -> None:
        if last is not None:
            entry = self._live(key)
            if entry is None or entry.revision != last:
                raise RevisionMismatchError(f"key {key}: revision {last} is not the last one")
        self.entries.pop(key, None)
        self.revision += 1

    async def ttl(self) -> float | None:
        return self.ttl_s

    async def purge(self, pattern: str) -> None:
        for key in [k for k in self.entries if subject_matches(pattern, k)]:
            del self.entries[key]
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
