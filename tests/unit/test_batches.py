"""Batched events (noetl.events.batches): what goes in comes out whole and in order, a batch's id
is its events', and the batching outbox keeps the order and the guarantees of the outbox below."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from noetl.events import subjects as s
from noetl.events.batches import BATCHED, BatchingOutbox, decode_events, events_in, pack, pack_sent, unbatch
from noetl.events.envelope import Event, dumps, loads, make_event


def _ev(i: int, name: Any = "task.done", **extra: Any) -> Event:
    return make_event(
        event_id=f"e{i}",
        execution_id="x1",
        timestamp=f"2026-11-25T00:00:{i:02d}Z",
        source="worker",
        name=name,
        entity_type="task",
        entity_id="t",
        status="success",
        payload={"index": i, "outcome": {"status": "ok", "result": i}},
        step_run_id="r1",
        task_run_id=f"tr{i}",
        trace_id=extra.pop("trace_id", None),
        **extra,
    )


def test_a_batch_gives_back_every_event_whole_and_in_order() -> None:
    events = [_ev(i) for i in range(5)] + [_ev(5, trace_id="other")]
    subject, data, msg_id = pack(events, 3, "each")
    assert subject == s.event_subject(3, "x1", BATCHED)
    stored = loads(data)
    inner = stored["payload"]["events"]
    assert all("execution_id" not in e and "step_run_id" not in e for e in inner), inner
    assert unbatch(stored) == events
    assert all(list(e)[:2] == ["event_id", "execution_id"] for e in unbatch(stored))
    assert unbatch(stored, frozenset({"step.done"})) == []
    assert len(unbatch(stored, frozenset({"task.done"}))) == 6
    assert decode_events(data) == events and events_in(data) == events
    assert msg_id == stored["event_id"]


def test_a_few_events_go_as_sent_and_unpack_to_the_same() -> None:
    events = [_ev(i, name="task.started") for i in range(3)] + [_ev(3, name="step.done")]
    sent = [(s.event_subject(2, "x1", e["name"]), dumps(e), e["event_id"]) for e in events]
    subject, data, msg_id = pack_sent(sent, "each")
    assert subject == s.event_subject(2, "x1", BATCHED)
    assert unbatch(loads(data)) == events == decode_events(data)
    assert msg_id == loads(data)["event_id"] == pack(events, 2, "each")[2]  # the same id either way


def test_a_batch_id_is_its_events_or_its_terminal_events() -> None:
    a = [_ev(i, name="task.started") for i in range(3)]
    assert pack(a, 0, "s")[2] == pack([dict(e) for e in a], 0, "s")[2]  # type: ignore[misc]
    assert pack(a, 0, "s")[2] != pack(a[:2], 0, "s")[2] != pack(a[1:], 0, "s")[2]
    assert pack(a, 0, "s")[2] != pack([a[0], a[2], a[1]], 0, "s")[2]
    # a command run again sends the same terminal in another batch: a repeat, dropped by its id
    end = _ev(9, name="step.done")
    assert pack([*a, end], 0, "s")[2] == pack([a[2], end], 0, "s")[2] != pack(a, 0, "s")[2]


def test_an_event_that_is_not_a_batch_is_itself_and_junk_is_nothing() -> None:
    e = _ev(1)
    assert unbatch(e) == [e] and events_in(dumps(e)) == [e]
    assert events_in(b"not json") == [] and events_in(b"[1]") == []


class _Below:
    """The outbox below: what it was sent, in order; can be told to fail."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, str, bool]] = []
        self.confirmed = 0
        self.fail: Exception | None = None

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.append((subject, data, msg_id, ack))

    async def confirm(self) -> None:
        self.confirmed += 1

    def events(self) -> list[Event]:
        return [e for _, data, _, _ in self.sent for e in unbatch(loads(data))]


def _wire(e: Event) -> tuple[str, bytes, str]:
    return s.event_subject(0, e["execution_id"], e["name"]), dumps(e), e["event_id"]


async def test_the_outbox_batches_keeps_order_and_an_ack_closes_the_batch() -> None:
    below = _Below()
    out = BatchingOutbox(below, "each", max_events=4, max_bytes=2000, max_age=60)
    evs = [_ev(i) for i in range(12)]
    for e in evs[:6]:
        await out.send(*_wire(e))
    assert len(below.sent) == 1  # the first four, full
    big = _ev(6)
    big["payload"]["blob"] = "x" * 3000
    evs[6] = big
    await out.send(*_wire(big))  # the two collected before it go first, then it alone
    await out.send(*_wire(evs[7]), ack=True)  # a batch of one is the event itself
    await out.send(*_wire(evs[8]))
    await out.send(*_wire(evs[9]), ack=True)  # closes a batch of two, which asks for the ack
    await out.send(*_wire(evs[10]))
    await out.confirm()
    assert below.confirmed == 1
    assert [e["event_id"] for e in below.events()] == [f"e{i}" for i in range(11)]
    kinds = [(loads(d)["name"], ack) for _, d, _, ack in below.sent]
    alone = [("task.done", False), ("task.done", True)]
    assert kinds == [(BATCHED, False), (BATCHED, False), *alone, (BATCHED, True), ("task.done", False)]
    assert below.sent[3][2] == "e7" and out.batches == 3


async def test_flushed_waits_for_the_batch_and_the_age_limit_sends_it() -> None:
    below = _Below()
    out = BatchingOutbox(below, "each", max_age=0.05)
    await out.send(*_wire(_ev(0)))
    waiter = asyncio.ensure_future(out.flushed())
    await asyncio.sleep(0.01)
    assert not waiter.done() and not below.sent
    await asyncio.wait_for(waiter, 2)
    assert len(below.sent) == 1 and out.batches == 0  # one event: sent as itself
    await out.flushed()  # nothing collected: at once


async def test_a_failed_batch_reaches_its_waiters_and_the_next_send() -> None:
    below = _Below()
    out = BatchingOutbox(below, "each", max_age=0.01)
    await out.send(*_wire(_ev(0)))
    below.fail = ConnectionError("gone")
    with pytest.raises(ConnectionError):
        await out.flushed()
    with pytest.raises(ConnectionError):
        await out.send(*_wire(_ev(1)))
