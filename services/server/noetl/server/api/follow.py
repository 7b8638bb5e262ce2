"""Replay an execution's events, then follow the new ones until ``playbook.processed``.

Following uses one ordered JetStream consumer on ``noetl.events.*.<id>.>`` from the first
event: it delivers the stored events and then the new ones in stream order, with no gap and no
repeat. A core subscription opened before reading the stream is not enough: nats-server routes a
published message to core subscribers before the stream has stored it, so an event published
just before the subscription could be missing from both (seen in tests, as three missing events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from noetl.events import subjects as s
from noetl.events.bus import read_execution_events
from noetl.events.envelope import loads

END_EVENT = "playbook.processed"


async def follow_events(
    nc: NATS,
    execution_id: str,
    *,
    after_event_id: str | None = None,
    follow: bool = True,
    stop: asyncio.Event | None = None,
    idle: float | None = None,
) -> AsyncIterator[dict[str, Any] | None]:
    """Yield events in order; with ``idle`` a ``None`` every ``idle`` quiet seconds (keep-alives).

    ``after_event_id`` resumes a client that already has the events up to that one (SSE's
    ``Last-Event-ID``); an id the log does not hold replays everything. Ends after
    ``playbook.processed``, when ``stop`` is set, or after the stored events when ``follow`` is
    false.
    """
    if not follow:
        events = await read_execution_events(nc.jetstream(), execution_id)
        ids = [e.get("event_id") for e in events]
        start = ids.index(after_event_id) + 1 if after_event_id in ids else 0
        for ev in events[start:]:
            yield ev
        return
    sub = await nc.jetstream().subscribe(
        s.execution_events_filter(execution_id),
        stream=s.EVENTS_STREAM,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    try:
        skipped: list[dict[str, Any]] | None = [] if after_event_id else None
        while stop is None or not stop.is_set():
            try:
                msg = await _next(sub, stop, idle)
            except TimeoutError:
                yield None
                continue
            if msg is None:
                return
            try:
                ev = loads(msg.data)
            except ValueError:
                continue
            if not isinstance(ev, dict):
                continue
            batch = [ev]
            if skipped is not None:
                if ev.get("event_id") == after_event_id:
                    skipped = None
                    continue
                skipped.append(ev)
                if msg.metadata.num_pending:
                    continue
                batch, skipped = skipped, None  # caught up without finding the id: replay it all
            for e in batch:
                yield e
                if e.get("name") == END_EVENT:
                    return
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _next(sub: Any, stop: asyncio.Event | None, idle: float | None) -> Any:
    """The next message, None once ``stop`` is set; TimeoutError after ``idle`` quiet seconds."""
    get = asyncio.ensure_future(sub.next_msg(timeout=idle or 10**9))
    waits: set[asyncio.Future[Any]] = {get}
    stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
    if stopper is not None:
        waits.add(stopper)
    try:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for f in waits:
            if not f.done():
                f.cancel()
    if get in done:
        return get.result()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await get
    return None
