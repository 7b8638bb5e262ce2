"""Replay an execution's events, then follow the new ones until ``playbook.processed``.

Following reads the stream itself (``Bus.follow`` on ``noetl.events.*.<id>.>``): it delivers the
stored events and then the new ones in stream order, with no gap and no repeat. A core
subscription opened before reading the stream is not enough: nats-server routes a published
message to core subscribers before the stream has stored it, so an event published just before
the subscription could be missing from both (seen in tests, as three missing events).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from noetl.events import subjects as s
from noetl.events.batches import events_in
from noetl.events.port import Bus, Message

END_EVENT = "playbook.processed"


async def follow_events(
    bus: Bus,
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
    filters = [s.execution_events_filter(execution_id)]
    start_seq = 1
    if after_event_id or not follow:
        stored = [(m.seq, ev) for m in await bus.read(s.EVENTS_STREAM, filters) for ev in events_in(m.data)]
        ids = [ev.get("event_id") for _, ev in stored]
        skip = ids.index(after_event_id) + 1 if after_event_id in ids else 0
        if not follow:
            for _, ev in stored[skip:]:
                yield ev
            return
        if skip:  # go on from the stream position after it: what was stored since comes next
            seq = stored[skip - 1][0]
            for at, ev in stored[skip:]:
                if at != seq:
                    break
                yield ev  # the rest of a batch the client had a part of
            start_seq = seq + 1
    paced = _paced(bus.follow(s.EVENTS_STREAM, filters, start_seq=start_seq), stop, idle)
    async with contextlib.aclosing(paced):  # a client gone mid-stream closes the reader now, not at GC
        async for m in paced:
            if m is None:
                yield None
                continue
            for ev in events_in(m.data):
                yield ev
                if ev.get("name") == END_EVENT:
                    return



async def _paced(
    messages: AsyncIterator[Message], stop: asyncio.Event | None, idle: float | None
) -> AsyncGenerator[Message | None, None]:
    """``messages``, with a None after every ``idle`` quiet seconds, until ``stop`` is set.

    A quiet spell leaves the pending read in place: cancelling an async generator's step would end
    the generator (and its reader) for good. It is cancelled only when we stop, which closes the
    reader (on NATS, its consumer)."""
    pending: asyncio.Task[Message] | None = None
    stopper = asyncio.ensure_future(stop.wait()) if stop is not None else None
    try:
        while stop is None or not stop.is_set():
            if pending is None:
                pending = asyncio.ensure_future(_step(messages))
            waits: set[asyncio.Future[Any]] = {pending} if stopper is None else {pending, stopper}
            done, _ = await asyncio.wait(waits, timeout=idle, return_when=asyncio.FIRST_COMPLETED)
            if pending in done:
                step, pending = pending, None
                try:
                    message = step.result()
                except StopAsyncIteration:
                    return
                yield message
            elif not done:
                yield None
            else:
                return
    finally:
        for task in (pending, stopper):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        aclose = getattr(messages, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()


async def _step(messages: AsyncIterator[Message]) -> Message:
    return await messages.__anext__()
