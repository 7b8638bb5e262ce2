"""Many events in one stored message: a worker's run, or an ``exec: local`` loop's iterations.

Every stored message costs nats-server a write (an fsync each with ``sync_interval: always``) and
both sides a round of protocol: an iteration that wrote its four events as four messages spent
more in nats-server than in the whole engine. An ``events.batched`` message carries many events
in their order; readers never see it, only the events it holds (``unbatch``, ``decode_events``),
so the engine, the projection and every follower read the same events whatever the placement
(docs/nats-contract.md, "Batched events").

A run's few events go in as they were sent (``pack_sent``: their bytes joined); a local loop's
many leave out the fields they share with the batch's envelope (``pack``: about a third of their
bytes). ``unbatch`` gives every event back whole either way.

The batch's id (its ``Nats-Msg-Id``) derives from the terminal events it holds, or from all of
its events when it holds none (``batch_id``): a batch sent again is dropped as a repeat, and so
is a redelivered command's terminal event in a batch of other events.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from noetl.events import subjects as s
from noetl.events import vocabulary as vocab
from noetl.events.clock import utc_now
from noetl.events.envelope import SCHEMA_VERSION, Event, check_event, decode_event, dumps, loads
from noetl.events.ids import derive_id
from noetl.events.port import EventOutbox

BATCHED = vocab.EVENTS_BATCHED
# the fields an event in a batch shares with the batch, left out of the event when equal
SHARED = ("execution_id", "source", "step_run_id", "parent_execution_id", "trace_id", "schema_version")
_TERMINAL = frozenset(vocab.WORKER_TERMINAL_EVENTS)
COMPACT_FROM = 16  # events in a batch from which their shared fields are left out
MAX_EVENTS = 256  # 64 one-task iterations
MAX_BYTES = 256 * 1024  # well under JetStream's 1 MiB; a larger event goes on its own
MAX_AGE_S = 0.02  # a long task's start shows within this


def unbatch(event: Event, names: frozenset[str] | None = None) -> list[Event]:
    """The events ``event`` stands for: itself, or the events a batch holds, in order (only
    those named in ``names`` when given: the server reads a batch for its inputs alone)."""
    if event.get("name") != BATCHED:
        return [event]
    shared = {k: event[k] for k in SHARED if k in event}  # type: ignore[literal-required]
    out: list[Event] = []
    for inner in (event.get("payload") or {}).get("events") or []:
        if not isinstance(inner, dict) or (names is not None and inner.get("name") not in names):
            continue
        # the id first, then what the batch shares, then the event's own fields
        whole = {"event_id": inner.get("event_id"), **shared, **inner}
        if None in whole.values():
            whole = {k: v for k, v in whole.items() if v is not None}
        out.append(whole)  # type: ignore[arg-type]
    return out


def events_of(data: bytes | str, names: frozenset[str] | None = None) -> list[Event]:
    """A stored message's events, for readers that take the log as it is (``loads`` of each
    message, no envelope check): one, or those of a batch (named in ``names``, when given)."""
    return unbatch(cast(Event, loads(data)), names)


def events_in(data: bytes | str) -> list[dict[str, Any]]:
    """``events_of`` for followers, which skip what is not an event (none for such a message)
    and take events as plain mappings."""
    try:
        event = loads(data)
    except ValueError:
        return []
    return cast(list[dict[str, Any]], unbatch(cast(Event, event))) if isinstance(event, dict) else []


def decode_events(data: bytes | str, names: frozenset[str] | None = None) -> list[Event]:
    """``decode_event`` for a reader that may meet a batch: the events it holds (those named in
    ``names``, when given), each checked."""
    event = decode_event(data)
    if event["name"] != BATCHED:
        return [event]
    return [check_event(e) for e in unbatch(event, names)]


def batch_id(named_ids: list[tuple[str, str]]) -> str:
    """A batch's ``Nats-Msg-Id`` from its events' (name, id): its terminal events' ids when it
    holds any, else all of its events'. A command that runs again after its worker died sends the
    same terminal, maybe in a batch of other events (a long task's start went out on its own the
    first time): it must be dropped as a repeat, as a terminal event sent alone is, and whatever
    else that batch holds is a repeat too (the first one's earlier events were stored before it)."""
    ends = [event_id for name, event_id in named_ids if name in _TERMINAL]
    return derive_id(BATCHED, *(ends or [event_id for _, event_id in named_ids]))


def pack(events: list[Event], partition: int, entity_id: str) -> tuple[str, bytes, str]:
    """One message for ``events`` (one execution's, one source's): its subject, bytes and id."""
    first = events[0]
    batch: dict[str, Any] = {
        "event_id": batch_id([(e["name"], e["event_id"]) for e in events]),
        "execution_id": first["execution_id"],
        "timestamp": events[-1].get("timestamp") or first.get("timestamp"),
        "source": first.get("source"),
        "name": BATCHED,
        "entity_type": "step",
        "entity_id": entity_id,
        "status": "in_progress",
    }
    for k in SHARED[2:]:
        if first.get(k) is not None:
            batch[k] = first[k]  # type: ignore[literal-required]
    inner: list[dict[str, Any]] = []
    for e in events:
        slim = {k: v for k, v in e.items() if not (k in SHARED and batch.get(k) == v)}
        for k in SHARED:
            if k in batch and k not in e:
                slim[k] = None  # absent here, present on the batch: unbatch must not add it
        inner.append(slim)
    batch["payload"] = {"events": inner}
    subject = s.event_subject(partition, first["execution_id"], BATCHED)
    return subject, dumps(batch), batch["event_id"]


def pack_sent(sent: list[tuple[str, bytes, str]], entity_id: str) -> tuple[str, bytes, str]:
    """One message for events as they were sent (subject, bytes, id), without decoding them: a
    run's few events cost their bytes joined, not a decode and an encode (~17 µs for five). They
    keep every field; only an ``exec: local`` loop's many are slimmed (``pack``)."""
    partition, execution_id, _ = s.parse_event_subject(sent[0][0])
    envelope = {
        "event_id": batch_id([(s.parse_event_subject(subject)[2], msg_id) for subject, _, msg_id in sent]),
        "execution_id": execution_id,
        "timestamp": utc_now(),
        "source": "worker",  # a batch is a worker's (its events keep their own fields)
        "name": BATCHED,
        "entity_type": "step",
        "entity_id": entity_id,
        "status": "in_progress",
        "schema_version": SCHEMA_VERSION,
    }
    head = dumps(envelope)[:-1] + b',"payload":{"events":['
    data = head + b",".join(d for _, d, _ in sent) + b"]}}"
    return s.event_subject(partition, execution_id, BATCHED), data, str(envelope["event_id"])


class BatchingOutbox:
    """An outbox that stores the events sent to it in batches (``EventOutbox``). ``send`` only
    collects; the batch goes out when it is full, when ``flush`` asks, when a message asks for
    its ack (a command's terminal event closes the batch: a short run is one message), or
    ``MAX_AGE_S`` after its first event, so a long task's start is still seen at once. An event
    larger than a batch goes on its own after what came before it, and a batch of one event is
    that event as it would have been sent alone.

    ``flushed()`` waits until what was sent before it is handed to the outbox below: an
    ``exec: local`` loop holds an iteration's slot until then, so never more iterations than run
    at once can have ended without their events out (what a killed worker runs again)."""

    def __init__(
        self,
        outbox: EventOutbox,
        entity_id: str,
        *,
        max_events: int = MAX_EVENTS,
        max_bytes: int = MAX_BYTES,
        max_age: float = MAX_AGE_S,
    ) -> None:
        self._outbox, self._entity_id = outbox, entity_id
        self._max_events, self._max_bytes, self._max_age = max_events, max_bytes, max_age
        self._raw: list[tuple[str, bytes, str]] = []  # as sent to us: a batch of one goes as it came
        self._bytes = 0
        self._lock = asyncio.Lock()  # one batch at a time to the outbox below: order kept
        self._timer: asyncio.TimerHandle | None = None
        self._done: asyncio.Future[None] | None = None  # resolved when the collecting batch is out
        self._sending: asyncio.Future[None] | None = None  # the batch on its way out, if any
        self._error: BaseException | None = None  # a timed flush's: the next send raises it
        self._timed: set[asyncio.Task[None]] = set()
        self.batches = 0  # batches of more than one event sent (tests read how events travelled)

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        if self._error is not None:
            raise self._error
        if self._raw and (
            self._bytes + len(data) > self._max_bytes or _execution(subject) != _execution(self._raw[0][0])
        ):
            await self.flush()  # full, or another execution's (one batch, one execution)
        if len(data) > self._max_bytes:
            async with self._lock:  # alone, after what came before it
                await self._outbox.send(subject, data, msg_id, ack=ack)
            return
        if not self._raw:
            self._done = asyncio.get_running_loop().create_future()
        self._raw.append((subject, data, msg_id))
        self._bytes += len(data)
        if ack or len(self._raw) >= self._max_events:
            await self.flush(ack=ack)
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._max_age, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if self._raw:
            task = asyncio.create_task(self._timed_flush())
            self._timed.add(task)
            task.add_done_callback(self._timed.discard)

    async def _timed_flush(self) -> None:
        try:
            await self.flush()
        except Exception as e:  # the waiters got it; the next send raises it, confirm settles it
            self._error = self._error or e

    async def flushed(self) -> None:
        """Returns once every event sent before this call is out (raises what sending raised)."""
        fut = self._done if self._raw else self._sending
        if fut is not None:
            await asyncio.shield(fut)

    async def flush(self, *, ack: bool = False) -> None:
        async with self._lock:
            await self._flush_locked(ack)

    async def _flush_locked(self, ack: bool = False) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._raw:
            return
        raw, done = self._raw, self._done
        self._raw, self._bytes, self._done, self._sending = [], 0, None, done
        try:
            if len(raw) == 1:
                await self._outbox.send(*raw[0], ack=ack)
            elif len(raw) < COMPACT_FROM:
                await self._outbox.send(*pack_sent(raw, self._entity_id), ack=ack)
                self.batches += 1
            else:
                # decoded from what was sent: the sender's dicts may have changed since
                events = [cast(Event, loads(data)) for _, data, _ in raw]
                partition = s.parse_event_subject(raw[0][0])[0]
                await self._outbox.send(*pack(events, partition, self._entity_id), ack=ack)
                self.batches += 1
        except BaseException as e:
            if done is not None and not done.done():
                done.set_exception(e)
                done.exception()  # retrieved: a waiter that went away leaves no warning
            raise
        finally:
            self._sending = None
        if done is not None and not done.done():
            done.set_result(None)

    async def confirm(self) -> None:
        """Every event sent so far is stored, or this raises (``EventOutbox.confirm``): the outbox
        below sends again whatever a failed send left unsettled, so an earlier failure is over."""
        self._error = None
        async with self._lock:
            await self._flush_locked()
            await self._outbox.confirm()


def _execution(subject: str) -> str:
    """An event subject's partition and execution: ``noetl.events.<p>.<execution_id>``."""
    return ".".join(subject.split(".", 4)[2:4])
