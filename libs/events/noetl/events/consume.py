"""The loop the server's timers and schedules share: a work queue handed to a handler, over the port.

Each delivery is acknowledged only after ``handle`` returns, so a process killed half-way leaves the
message to another one after its ack wait (handlers derive their ids from the message, so a second
handling stores nothing new). A fetch that fails (a reconnect, a leader election) is waited out
rather than ending the loop, and at the stop what was fetched and not handled goes back at once
instead of after its ack wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from noetl.events.port import Bus, Delivery, QueueConfig
from noetl.events.retry import describe

log = logging.getLogger("noetl.events")


async def consume(
    bus: Bus,
    config: QueueConfig,
    handle: Callable[[Delivery], Awaitable[None]],
    stopping: asyncio.Event,
    *,
    batch: int = 64,
    what: str = "messages",
) -> None:
    """Hand each message of the durable queue ``config`` to ``handle``, then acknowledge it, until
    ``stopping`` is set (seen within a second)."""
    queue = await bus.queue(config)
    try:
        while not stopping.is_set():
            try:
                deliveries = await queue.fetch(batch, 1.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("%s: fetch failed: %s", what, describe(e))
                await asyncio.sleep(0.2)
                continue
            for d in deliveries:
                await handle(d)
                try:
                    await d.ack()
                except Exception as e:  # not acknowledged: delivered again after the ack wait
                    log.warning("%s: acknowledging message %s failed: %s", what, d.seq, describe(e))
    finally:
        with contextlib.suppress(Exception):
            await queue.close(nak=True)
