"""Low-latency batched reads from a pull consumer.

nats-py's ``fetch(n)`` waits, once the stream is idle, until ``n`` messages or its time-out,
which adds up to the whole time-out to a message that arrives alone. This reader asks for what
is available now (``no_wait``), and when nothing is, parks one request for a single message and
drains the rest as soon as it arrives: one message is handed over at once, a burst in batches.
All requests reply to one inbox, so a message answering a request that timed out on our side is
still read by the next call instead of being lost until its ack wait.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

_NO_MESSAGES = {"404", "408", "409"}


class Puller:
    def __init__(self, nc: NATS, stream: str, consumer: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self._sub: Any = None

    async def start(self) -> Puller:
        self._sub = await self.nc.subscribe(self.inbox)
        return self

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
            self._sub = None

    async def _request(self, batch: int, *, no_wait: bool, expires: float | None = None) -> None:
        req: dict[str, Any] = {"batch": batch}
        if no_wait:
            req["no_wait"] = True
        if expires:
            req["expires"] = int(expires * 1e9)
        await self.nc.publish(self.subject, json.dumps(req).encode(), reply=self.inbox)

    async def _next(self, timeout: float) -> Msg | None:
        try:
            return await self._sub.next_msg(timeout=timeout)
        except TimeoutError:
            return None

    def _queued(self) -> list[Msg]:
        q = self._sub._pending_queue
        out = []
        while not q.empty():
            out.append(q.get_nowait())
        return out

    @staticmethod
    def _status(msg: Msg) -> str | None:
        return (msg.headers or {}).get("Status") if msg.headers else None

    async def fetch(self, max_msgs: int, wait: float = 1.0) -> list[Msg]:
        """Between 1 and ``max_msgs`` messages, or [] after about ``wait`` seconds of nothing."""
        got = [m for m in self._queued() if self._status(m) is None][:max_msgs]
        if len(got) < max_msgs:
            got += await self._drain(max_msgs - len(got))
        if got:
            return got
        await self._request(1, no_wait=False, expires=wait)
        deadline = asyncio.get_running_loop().time() + wait + 0.5
        while True:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return []
            msg = await self._next(left)
            if msg is None:
                return []
            status = self._status(msg)
            if status is None:
                got = [msg]
                break
            if status in _NO_MESSAGES:
                return []
            # 100 = heartbeat; keep waiting
        if max_msgs > 1:
            got += await self._drain(max_msgs - 1)
        return got

    async def _drain(self, n: int) -> list[Msg]:
        """Whatever is available now, up to ``n``: the server answers no_wait with a status."""
        await self._request(n, no_wait=True)
        out: list[Msg] = []
        while len(out) < n:
            msg = await self._next(5.0)
            if msg is None:
                break
            status = self._status(msg)
            if status is None:
                out.append(msg)
            elif status in _NO_MESSAGES:
                break
        return out
