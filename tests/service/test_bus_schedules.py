"""JetStream message scheduling (ADR-51), one contract for both buses: timers and schedules rely on it.

Every test runs against ``MemoryBus`` and against ``NatsBus`` on the session's nats-server (2.14 or
later: cron and time zones); a difference is a bug of the twin (``noetl.events.memory_schedules``).
A stream holds schedules only when declared so (``StreamConfig(schedules=True)``, NATS's
``allow_msg_schedules``): elsewhere both refuse a definition.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from noetl.events.consume import consume
from noetl.events.memory import MemoryBus
from noetl.events.port import BusRefusedError, Delivery, Message, QueueConfig, StreamConfig
from noetl.store.schedules import fire_time

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(Z|[+-]\d\d:\d\d)$")


async def _stream(bus: Any, *, work_queue: bool = False) -> tuple[str, str]:
    """A stream of its own that takes schedules: (name, subject prefix)."""
    tag = uuid.uuid4().hex[:8]
    name, prefix = f"SCHED_{tag}", f"sched{tag}"
    await bus.add_stream(StreamConfig(name, (f"{prefix}.>",), work_queue=work_queue, schedules=True))
    return name, prefix


async def test_a_stream_not_declared_for_schedules_refuses_a_definition(bus: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    await bus.add_stream(StreamConfig(f"PLAIN_{tag}", (f"plain{tag}.>",)))
    with pytest.raises(BusRefusedError):
        headers = {**_at(5), "Nats-Schedule-Target": f"plain{tag}.due"}
        await bus.publish(f"plain{tag}.at", b"x", headers=headers)


def _at(seconds: float) -> dict[str, str]:
    return {"Nats-Schedule": f"@at {(datetime.now(UTC) + timedelta(seconds=seconds)).isoformat()}"}


async def _until(found: Callable[[], Awaitable[list[Message]]], timeout: float) -> list[Message]:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (got := await found()) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    return got


async def test_an_at_schedule_fires_its_body_once_on_its_target_and_goes(bus: Any) -> None:
    stream, p = await _stream(bus)
    headers = {**_at(0.6), "Nats-Schedule-Target": f"{p}.due", "X-Tag": "kept"}
    await bus.publish(f"{p}.at.one", b"the body", msg_id="timer-one", headers=headers)
    fires = await _until(lambda: bus.read(stream, [f"{p}.due"]), 5)
    await asyncio.sleep(0.5)
    assert [m.data for m in await bus.read(stream, [f"{p}.due"])] == [b"the body"]
    h = fires[0].headers or {}
    assert h.get("Nats-Scheduler") == f"{p}.at.one" and h.get("Nats-Schedule-Next") == "purge", h
    assert h.get("X-Tag") == "kept" and fires[0].msg_id is None, h
    assert not any(k.startswith("Nats-Schedule-T") or k == "Nats-Schedule" for k in h), h
    assert await bus.last(stream, f"{p}.at.one") is None, "a fired @at definition is removed"


async def test_a_new_definition_on_the_same_subject_replaces_the_old_one(bus: Any) -> None:
    stream, p = await _stream(bus)
    target = {"Nats-Schedule-Target": f"{p}.due"}
    await bus.publish(f"{p}.at.x", b"old", headers={**_at(0.6), **target})
    await bus.publish(f"{p}.at.x", b"new", headers={**_at(1.0), **target})
    defined = await bus.read(stream, [f"{p}.at.x"])
    assert [m.data for m in defined] == [b"new"], "a definition rolls up the one before it"
    assert (defined[0].headers or {}).get("Nats-Rollup") == "sub"
    await _until(lambda: bus.read(stream, [f"{p}.due"]), 5)
    await asyncio.sleep(0.5)
    assert [m.data for m in await bus.read(stream, [f"{p}.due"])] == [b"new"]


async def test_a_purged_definition_never_fires(bus: Any) -> None:
    stream, p = await _stream(bus)
    await bus.publish(f"{p}.at.gone", b"x", headers={**_at(0.5), "Nats-Schedule-Target": f"{p}.due"})
    await bus.purge(stream, f"{p}.at.*")
    await asyncio.sleep(1.5)
    assert await bus.read(stream, [f"{p}.>"]) == []


async def test_a_cron_schedule_names_its_next_fire_and_rollup_keeps_one_fire(bus: Any) -> None:
    stream, p = await _stream(bus)
    every_second = "*/1 * * * * *"
    rolled = {
        "Nats-Schedule": every_second,
        "Nats-Schedule-Target": f"{p}.fire.rolled",
        "Nats-Schedule-Rollup": "sub",
        "Nats-Schedule-Time-Zone": "Europe/Paris",
    }
    await bus.publish(f"{p}.cron.rolled", b"r", headers=rolled)
    await bus.publish(
        f"{p}.cron.plain",
        b"p",
        headers={"Nats-Schedule": every_second, "Nats-Schedule-Target": f"{p}.fire.plain"},
    )

    async def two_plain() -> list[Message]:
        got = await bus.read(stream, [f"{p}.fire.plain"])
        return got if len(got) >= 2 else []

    plain = await _until(two_plain, 6)
    assert len(plain) >= 2, "a cron schedule fires every time it is due"
    (kept,) = await bus.read(stream, [f"{p}.fire.rolled"])  # the rollup leaves the latest fire only
    for m, zone in [(kept, "Europe/Paris"), *((m, None) for m in plain)]:
        h = m.headers or {}
        nxt = h.get("Nats-Schedule-Next", "")
        assert RFC3339.match(nxt) and h.get("Nats-Scheduler", "").startswith(f"{p}.cron."), h
        assert nxt.endswith("Z") != bool(zone), f"the next fire is given in the schedule's zone: {nxt}"
        assert h.get("Nats-Rollup") == ("sub" if zone else None), h
        stamped = datetime.fromtimestamp(m.stamp, UTC)
        assert datetime.fromisoformat(nxt) - stamped.replace(microsecond=0) == timedelta(seconds=1), (
            nxt,
            stamped,
        )
        due = fire_time({"cron": every_second, "timezone": zone}, nxt, stamped)
        assert due == stamped.replace(microsecond=0), "the due time a fire stands for"
    assert len(await bus.read(stream, [f"{p}.cron.>"])) == 2, "a cron definition stays"

    await bus.purge(stream, f"{p}.cron.>")
    count = await bus.count(stream)
    await asyncio.sleep(1.3)
    assert await bus.count(stream) == count, "a purged cron schedule fires no more"


async def test_fires_reach_a_work_queue_through_the_consume_loop(bus: Any) -> None:
    stream, p = await _stream(bus, work_queue=True)
    await bus.publish(
        f"{p}.at.t1", b"timer", msg_id="t1", headers={**_at(0.5), "Nats-Schedule-Target": f"{p}.due"}
    )
    handled: list[bytes] = []
    stopping = asyncio.Event()

    async def handle(d: Delivery) -> None:
        handled.append(d.data)
        assert d.stamp > 0 and (d.headers or {}).get("Nats-Scheduler") == f"{p}.at.t1"
        stopping.set()

    config = QueueConfig(stream, f"c{p}", f"{p}.due", ack_wait=5.0)
    await asyncio.wait_for(consume(bus, config, handle, stopping, what="test fires"), 10)
    assert handled == [b"timer"]
    assert await bus.count(stream) == 0, "the definition went with its fire, the fire with its ack"


@pytest.mark.parametrize(
    "headers",
    [
        {"Nats-Schedule": "nope * * * * *"},
        {"Nats-Schedule": "*/5 * * * *"},  # NATS takes 6 fields only (``nats_cron``)
        {"Nats-Schedule": "@at tomorrow"},
        {**_at(60), "Nats-Schedule-Time-Zone": "Europe/Paris"},  # a time zone is for a cron
        {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Time-Zone": "Mars/Olympus"},
        {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Rollup": "all"},
        {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "elsewhere.fire"},
        {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "SELF"},
        {"Nats-Schedule": "* * * * * *", "Nats-Schedule-Target": "WILD.*"},
    ],
)
async def test_a_schedule_nats_would_not_take_is_refused(bus: Any, headers: dict[str, str]) -> None:
    stream, p = await _stream(bus)
    subject = f"{p}.def.one"
    target = headers.get("Nats-Schedule-Target", f"{p}.fire.one")
    target = subject if target == "SELF" else target.replace("WILD", p)
    with pytest.raises(BusRefusedError):
        await bus.publish(subject, b"x", headers={**headers, "Nats-Schedule-Target": target})
    assert await bus.count(stream) == 0


async def test_the_twin_fires_when_its_wall_clock_is_moved_and_not_after_close() -> None:
    now = [datetime.now(UTC).timestamp()]
    bus = MemoryBus(wall=lambda: now[0])
    try:
        await bus.add_stream(StreamConfig("T", ("t.>",), schedules=True))

        def at(seconds: float) -> dict[str, str]:
            when = datetime.fromtimestamp(now[0] + seconds, UTC).isoformat()
            return {"Nats-Schedule": f"@at {when}", "Nats-Schedule-Target": "t.due"}

        await bus.publish("t.at.a", b"in an hour", headers=at(3600))
        await asyncio.sleep(0.2)
        assert await bus.read("T", ["t.due"]) == []
        now[0] += 3600
        fired = await _until(lambda: bus.read("T", ["t.due"]), 1)
        assert [m.data for m in fired] == [b"in an hour"] and fired[0].stamp == now[0]
        await bus.publish("t.at.b", b"never", headers=at(10))
    finally:
        await bus.close()
    now[0] += 60
    await asyncio.sleep(0.2)
    assert [m.data for m in await bus.read("T", ["t.due"])] == [b"in an hour"], "closed, it fires nothing"
