"""The requests loop: every replica takes requests (execute, cancel, signal, pause, resume) from
one shared durable consumer, records each until it is stored and only then acknowledges it.
Part of ``noetl.server.service.Server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from noetl.events import subjects as s
from noetl.events.port import Delivery, QueueConfig
from noetl.events.retry import retrying
from noetl.server.parts import (
    REQUEST_ACK_WAIT,
    ServerParts,
)

log = logging.getLogger("noetl.server")


class RequestIntake(ServerParts):
    async def _request_loop(self) -> None:
        config = QueueConfig(
            stream=s.REQUESTS_STREAM,
            consumer="noetl-server-requests",
            filter=s.REQUESTS_FILTER,
            ack_wait=REQUEST_ACK_WAIT,
            max_deliver=5,
        )
        queue = await retrying(lambda: self.bus.queue(config), "request consumer")
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await queue.fetch(64, 1.0)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # connection blips: keep the loop alive
                    log.warning("request fetch failed: %s", e)
                    await asyncio.sleep(0.2)
                    continue
                # requests are independent of each other: handle a batch at once; its cancels,
                # signals, pauses and resumes after them, so one sent right after its request finds
                # the execution recorded, and in the order they came (signals queue in that order)
                others = [m for m in msgs if m.subject != s.REQUEST_SUBJECT]
                await asyncio.gather(*(self._request(m) for m in msgs if m.subject == s.REQUEST_SUBJECT))
                for m in others:
                    await self._request(m)
        finally:
            with contextlib.suppress(Exception):
                await queue.close(nak=True)  # requests delivered and not handled: to the next server now

    async def _request(self, m: Delivery) -> None:
        """Recorded with the same ids until it is stored (through an election, holding the message
        with in-progress acks), then acknowledged; only a failure of its own is nak'ed."""
        msg_id = m.msg_id

        async def attempt() -> Any:
            if m.subject == s.CANCEL_SUBJECT:
                return await self.requests.cancel(m.data)
            if m.subject in (s.SIGNAL_SUBJECT, s.PAUSE_SUBJECT, s.RESUME_SUBJECT):
                return await self.requests.outside(m.subject, m.data, msg_id)
            return await self.requests.handle(m.data, msg_id)

        holding = asyncio.create_task(_hold(m))
        try:
            await retrying(attempt, "recording a request")
        except Exception as failure:
            # not NATS (retried above): the request itself breaks something. Its sender still gets
            # an answer; a request that cannot even be rejected is redelivered, then dropped
            log.exception("request handling failed; rejecting it")
            cause: BaseException = failure
            try:
                await retrying(lambda: self.requests.reject_unrecordable(m.data, msg_id, cause), "rejecting")
            except Exception:
                with contextlib.suppress(Exception):
                    await m.nak(delay=1)
                return
        finally:
            holding.cancel()
        await m.ack()


async def _hold(msg: Any, every: float = REQUEST_ACK_WAIT / 3) -> None:
    """In-progress acks while a message is being handled, so its ack wait does not run out."""
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):
            await msg.in_progress()
