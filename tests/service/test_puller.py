"""The pull-consumer reader against a real nats-server: credit, expiry, restarts, no drops."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.js.api import AckPolicy, ConsumerConfig, StreamConfig

from noetl.events.bus import connect
from noetl.events.puller import Puller, PullRefusedError
from noetl.host.natsserver import NatsServer


async def _setup(nc: Any, name: str, ack: AckPolicy = AckPolicy.EXPLICIT) -> Any:
    js = nc.jetstream()
    await js.add_stream(StreamConfig(name=name, subjects=[f"{name.lower()}.>"]))
    await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=ack, ack_wait=30))
    return js


async def _take(puller: Puller, n: int, room: int = 64, timeout: float = 10.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += await puller.fetch(room, wait=0.5)
    return got


async def test_messages_arrive_one_by_one_without_a_request_each(nc: Any) -> None:
    js = await _setup(nc, "PULL_SEQ", AckPolicy.NONE)
    puller = await Puller(nc, "PULL_SEQ", "c", batch=64).start()
    try:
        for i in range(200):  # a sequential path: each message is published after the last is read
            await js.publish("pull_seq.x", str(i).encode())
            got = await puller.fetch(64, wait=5)
            assert [m.data for m in got] == [str(i).encode()]
        # one request per half batch, not one (or two) per message
        assert puller.requests <= 200 // 32 + 2
    finally:
        await puller.stop()


async def test_credit_never_exceeds_the_callers_room(nc: Any) -> None:
    js = await _setup(nc, "PULL_ROOM")
    for i in range(20):
        await js.publish("pull_room.x", str(i).encode())
    puller = await Puller(nc, "PULL_ROOM", "c", batch=64).start()
    try:
        got = await _take(puller, 3, room=3)
        assert len(got) == 3
        await asyncio.sleep(0.3)  # whatever was asked for has arrived by now
        info = await js.consumer_info("PULL_ROOM", "c")
        assert info.num_ack_pending == 3  # nothing hoarded beyond the room
        assert await puller.fetch(0, wait=0.2) == []
        for m in got:
            await m.ack()
        rest = await _take(puller, 17, room=64)
        assert sorted(int(m.data) for m in got + rest) == list(range(20))
    finally:
        await puller.stop()


async def test_expired_requests_are_renewed(nc: Any) -> None:
    js = await _setup(nc, "PULL_EXP", AckPolicy.NONE)
    puller = await Puller(nc, "PULL_EXP", "c", batch=8, expires=1.0, heartbeat=0.3).start()
    try:
        assert await puller.fetch(8, wait=2.5) == []  # two or three requests expire meanwhile
        before = puller.requests
        assert before >= 2
        await js.publish("pull_exp.x", b"late")
        got = await puller.fetch(8, wait=3)
        assert [m.data for m in got] == [b"late"]
    finally:
        await puller.stop()


async def test_no_message_is_dropped_as_a_slow_consumer(nc: Any) -> None:
    """Messages taken from the buffer are released from nats-py's pending-bytes budget."""
    js = await _setup(nc, "PULL_BYTES", AckPolicy.NONE)
    # a burst of one batch fits the budget (4 x 8 kB < 64 KiB); the whole run does not
    puller = await Puller(nc, "PULL_BYTES", "c", batch=4, pending_bytes_limit=64 * 1024).start()
    body = b"x" * 8000
    try:
        for i in range(300):  # 2.4 MB through a 64 KiB budget
            await js.publish("pull_bytes.x", body + str(i).encode())
        got = await _take(puller, 300, room=4, timeout=20)
        assert [m.data[8000:] for m in got] == [str(i).encode() for i in range(300)]
    finally:
        await puller.stop()


async def test_a_deleted_consumer_is_reported(nc: Any) -> None:
    js = await _setup(nc, "PULL_DEL", AckPolicy.NONE)
    puller = await Puller(nc, "PULL_DEL", "c").start()
    try:
        assert await puller.fetch(8, wait=0.3) == []
        await js.delete_consumer("PULL_DEL", "c")
        with pytest.raises(PullRefusedError, match="409"):
            for _ in range(10):
                await puller.fetch(8, wait=0.5)
    finally:
        await puller.stop()


async def test_reading_resumes_after_a_nats_server_restart(fresh_nats: NatsServer) -> None:
    nc = await connect(fresh_nats.url, name="puller-restart")
    try:
        js = await _setup(nc, "PULL_RST", AckPolicy.NONE)
        puller = await Puller(nc, "PULL_RST", "c", batch=8).start()
        assert await puller.fetch(8, wait=0.3) == []  # a request is now waiting at the server
        fresh_nats.kill()  # the waiting request dies with it
        fresh_nats.start()
        for _ in range(100):
            if nc.stats["reconnects"] and nc.is_connected:
                break
            await asyncio.sleep(0.1)
        await js.publish("pull_rst.x", b"after")
        got = await _take(puller, 1, room=8, timeout=15)
        assert [m.data for m in got] == [b"after"]
        await puller.stop()
    finally:
        await nc.close()


async def test_stop_hands_untaken_messages_back_at_once(nc: Any) -> None:
    """Delivered into the buffer, never taken: nak'd on stop instead of waiting out the ack wait."""
    for name, nak in (("PULL_NAK", True), ("PULL_KEEP", False)):
        js = await _setup(nc, name)  # explicit acks, 30 s ack wait
        first = await Puller(nc, name, "c").start()
        assert await first.fetch(5, wait=0.2) == []  # credit for 5 is now waiting at the server
        for i in range(5):
            await js.publish(f"{name.lower()}.x", str(i).encode())
        await asyncio.sleep(0.3)  # all five are in first's buffer; nobody took them
        await first.stop(nak=nak)
        second = await Puller(nc, name, "c").start()
        try:
            got = await _take(second, 5, room=64, timeout=3)
        finally:
            await second.stop()
        assert len(got) == (5 if nak else 0)
