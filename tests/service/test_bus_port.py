"""One contract, two buses: the in-memory twin keeps JetStream's semantics (issue 16).

Every test runs against ``MemoryBus`` and against ``NatsBus`` on the session's real nats-server;
a difference between them is a bug of the twin. Names carry a random suffix: the nats-server is
shared by the whole session.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from noetl.events.port import (
    BusError,
    BusRefusedError,
    KeyExistsError,
    NoStreamError,
    QueueConfig,
    RevisionMismatchError,
    StreamConfig,
    subject_matches,
)


def _names() -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return f"PORT_{tag}", f"port{tag}"


def test_subject_matching() -> None:
    assert subject_matches("a.*.c", "a.b.c") and not subject_matches("a.*.c", "a.b.d")
    assert subject_matches("a.>", "a.b.c") and not subject_matches("a.>", "a")
    assert not subject_matches("a.b", "a.b.c") and subject_matches("a.b", "a.b")


async def test_publish_orders_filters_and_drops_duplicates(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
    first = await bus.publish(f"{prefix}.x.one", b"1", msg_id="m1")
    again = await bus.publish(f"{prefix}.x.one", b"1 again", msg_id="m1")
    await bus.publish(f"{prefix}.y.two", b"2", msg_id="m2")
    await bus.publish(f"{prefix}.x.three", b"3")
    assert again.duplicate and again.seq == first.seq and not first.duplicate
    every = await bus.read(stream, [f"{prefix}.>"])
    assert [m.data for m in every] == [b"1", b"2", b"3"], every
    assert [m.data for m in await bus.read(stream, [f"{prefix}.x.*"])] == [b"1", b"3"]
    seqs = [m.seq for m in every]
    assert [m.data for m in await bus.read(stream, [f"{prefix}.>"], start_seq=seqs[1])] == [b"2", b"3"]
    assert [m.data for m in await bus.read(stream, [f"{prefix}.>"], before_seq=seqs[2])] == [b"1", b"2"]
    last = await bus.last(stream, f"{prefix}.x.*")
    assert last is not None and last.data == b"3"
    assert await bus.last(stream, f"{prefix}.z.*") is None
    await bus.purge(stream, f"{prefix}.x.>")
    assert [m.data for m in await bus.read(stream, [f"{prefix}.>"])] == [b"2"]


async def test_a_subject_no_stream_takes_is_refused(bus: Any) -> None:
    _, prefix = _names()
    with pytest.raises(NoStreamError):
        await bus.publish(f"{prefix}.nowhere", b"x")


async def test_follow_sees_old_and_new_messages_in_order(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
    await bus.publish(f"{prefix}.a", b"0")
    seen: list[bytes] = []

    async def reader() -> None:
        async for m in bus.follow(stream, [f"{prefix}.a"]):
            seen.append(m.data)
            if len(seen) == 3:
                return

    task = asyncio.create_task(reader())
    await asyncio.sleep(0.05)
    await bus.publish(f"{prefix}.b", b"not followed")
    await bus.publish(f"{prefix}.a", b"1")
    await bus.publish(f"{prefix}.a", b"2")
    await asyncio.wait_for(task, 10)
    assert seen == [b"0", b"1", b"2"]


async def test_work_queue_acks_redelivers_and_stops_at_max_deliver(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",), work_queue=True))
    q = await bus.queue(QueueConfig(stream, f"c{prefix}", f"{prefix}.>", ack_wait=0.5, max_deliver=2))
    for i in range(3):
        await bus.publish(f"{prefix}.cmd", str(i).encode(), msg_id=f"c{i}")
    got = await q.fetch(10, 2.0)
    assert [d.data for d in got] == [b"0", b"1", b"2"] and all(d.delivered == 1 for d in got)
    await got[0].ack()  # done: gone from the work-queue stream
    await got[1].nak(0.2)  # again after 0.2 s
    # got[2] is neither acked nor naked: again after ack_wait (0.5 s)
    assert await q.fetch(10, 0.05) == []
    again = await q.fetch(10, 2.0)
    assert [(d.data, d.delivered) for d in again] == [(b"1", 2)], again
    later = await q.fetch(10, 2.0)
    assert [(d.data, d.delivered) for d in later] == [(b"2", 2)], later
    await again[0].term()
    # max_deliver 2: the unanswered one is not handed out a third time
    assert await q.fetch(10, 1.0) == []
    assert await bus.count(stream) == 1, "the acked and the terminated message left; the other stays"
    with pytest.raises(BusError):  # a work queue is read through its queue only
        await bus.read(stream, [f"{prefix}.>"])


async def test_in_progress_holds_a_delivery(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",), work_queue=True))
    q = await bus.queue(QueueConfig(stream, f"c{prefix}", f"{prefix}.>", ack_wait=0.6))
    await bus.publish(f"{prefix}.cmd", b"long")
    (d,) = await q.fetch(1, 2.0)
    for _ in range(3):  # 0.9 s in all, past ack_wait, but kept alive
        await asyncio.sleep(0.3)
        await d.in_progress()
    assert await q.fetch(1, 0.1) == []
    await d.ack()
    assert await q.fetch(1, 0.8) == []


async def test_key_value_revisions_create_update_delete(bus: Any) -> None:
    _, prefix = _names()
    kv = await bus.kv(f"kv{prefix}")
    assert await kv.get("a") is None
    r1 = await kv.create("a", b"1")
    with pytest.raises(KeyExistsError):
        await kv.create("a", b"again")
    r2 = await kv.update("a", b"2", last=r1)
    with pytest.raises(RevisionMismatchError):
        await kv.update("a", b"3", last=r1)
    got = await kv.get("a")
    assert got is not None and got.value == b"2" and got.revision == r2 > r1
    await kv.put("member.x", b"x")
    await kv.put("member.y", b"y")
    assert await kv.keys("member.") == ["member.x", "member.y"]
    await kv.delete("a")
    assert await kv.get("a") is None
    await kv.create("a", b"after delete")  # a deleted key can be created again


async def test_key_value_ttl_forgets_a_key(bus: Any) -> None:
    _, prefix = _names()
    kv = await bus.kv(f"ttl{prefix}", ttl=1.0)
    await kv.put("lease", b"me")
    assert await kv.get("lease") is not None
    await asyncio.sleep(1.5)
    assert await kv.get("lease") is None


async def test_object_store_round_trip(bus: Any) -> None:
    _, prefix = _names()
    store = await bus.objects(f"obj{prefix}")
    data = bytes(range(256)) * 4096  # 1 MiB: several chunks on NATS
    await store.put("exec/1/result", data)
    assert await store.get("exec/1/result") == data
    assert await store.get("exec/1/none") is None


async def test_headers_travel_with_a_message_to_every_reader(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
    await bus.publish(f"{prefix}.a", b"1", msg_id="one", headers={"X-Why": "test"})
    (read,) = await bus.read(stream, [f"{prefix}.>"])
    last = await bus.last(stream, f"{prefix}.a")
    assert read.msg_id == "one" and (read.headers or {}).get("X-Why") == "test"
    assert last is not None and last.msg_id == "one" and read.stamp > 0
    qstream, qprefix = _names()
    await bus.add_stream(StreamConfig(qstream, (f"{qprefix}.>",), work_queue=True))
    await bus.publish(f"{qprefix}.cmd", b"c", msg_id="cmd-1")
    (d,) = await (await bus.queue(QueueConfig(qstream, f"c{qprefix}", f"{qprefix}.>"))).fetch(1, 2.0)
    assert d.msg_id == "cmd-1" and d.stamp > 0
    await d.ack()


async def test_a_reader_hands_over_in_order_from_where_it_starts(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
    for i in range(5):
        await bus.publish(f"{prefix}.{'in' if i % 2 == 0 else 'out'}", str(i).encode())
    reader = await bus.reader(stream, [f"{prefix}.in"], start_seq=2)
    try:
        got = await reader.fetch(10, 2.0)
        assert [m.data for m in got] == [b"2", b"4"] and [m.seq for m in got] == [3, 5]
        assert await reader.fetch(10, 0.1) == []
        await bus.publish(f"{prefix}.in", b"5")
        assert [m.data for m in await reader.fetch(10, 2.0)] == [b"5"]
    finally:
        await reader.close()


async def test_a_delete_with_a_revision_only_removes_that_revision(bus: Any) -> None:
    _, prefix = _names()
    kv = await bus.kv(f"del{prefix}")
    first = await kv.create("p0", b"me")
    second = await kv.update("p0", b"me again", last=first)
    with pytest.raises(RevisionMismatchError):  # another writer has renewed it since
        await kv.delete("p0", last=first)
    assert (await kv.get("p0")) is not None
    await kv.delete("p0", last=second)
    assert await kv.get("p0") is None and await kv.keys() == []


async def test_a_bucket_takes_the_ttl_it_is_opened_with(bus: Any) -> None:
    _, prefix = _names()
    kv = await bus.kv(f"ttl{prefix}", ttl=5.0)
    assert await kv.ttl() == pytest.approx(5.0)
    again = await bus.kv(f"ttl{prefix}", ttl=3.0)  # a changed setting reaches the existing bucket
    assert await again.ttl() == pytest.approx(3.0) and await kv.ttl() == pytest.approx(3.0)


async def test_a_message_over_max_payload_is_refused_for_good(bus: Any) -> None:
    stream, prefix = _names()
    await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
    big = b"x" * (8 * 1024 * 1024 + 1)  # over any nats-server's max_payload (8 MiB at most)
    with pytest.raises(BusRefusedError):
        await bus.publish(f"{prefix}.big", big)
    box = bus.outbox()
    with pytest.raises(BusRefusedError):
        await box.send(f"{prefix}.big", big, "big-1", ack=True)
        await box.confirm()


async def test_a_key_pattern_purge_removes_only_matching_keys(bus: Any) -> None:
    _, prefix = _names()
    kv = await bus.kv(f"iter{prefix}")
    for key in ("e1.r1.0", "e1.r1.1", "e1.r2.0", "e2.r1.0"):
        await kv.put(key, b"snapshot")
    await kv.purge("e1.r1.*")
    assert await kv.keys() == ["e1.r2.0", "e2.r1.0"]


async def test_a_follow_whose_consumer_is_lost_goes_on_after_the_last_message(nats_server: Any) -> None:
    """NATS only (the twin has no consumers to lose): a consumer deleted under a follow (a node
    gone, a restart, a long disconnect) is noticed and a new one goes on, nothing skipped."""
    from noetl.events.bus import connect
    from noetl.events.nats_port import NatsBus

    nc = await connect(nats_server.url, name="noetl-follow-lost")
    try:
        bus = NatsBus(nc)
        stream, prefix = _names()
        await bus.add_stream(StreamConfig(stream, (f"{prefix}.>",)))
        await bus.publish(f"{prefix}.a", b"0")
        follow = bus.follow(stream, [f"{prefix}.>"])
        first = await asyncio.wait_for(anext(follow), 5)
        for info in await nc.jetstream().consumers_info(stream):
            await nc.jetstream().delete_consumer(stream, info.name)
        await bus.publish(f"{prefix}.a", b"1")
        await bus.publish(f"{prefix}.a", b"2")
        rest = [await asyncio.wait_for(anext(follow), 10) for _ in range(2)]
        await follow.aclose()
        got = [m.data for m in (first, *rest)]
        assert got == [b"0", b"1", b"2"], f"the follow gave {got} after its consumer was deleted"
    finally:
        await nc.close()
