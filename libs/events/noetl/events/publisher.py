"""Acknowledged JetStream publishes, cheaper than nats-py's ``publish_async``.

nats-py pays per message for an ``asyncio.wait_for`` on a semaphore (a task per message), a
random reply token and a JSON parse of every ack. Here one wildcard subscription per connection
receives the acks, a counter names the replies, and an ack is parsed only when it reports an
error: the publish path is what the hot path spends most of its CPU on (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import json
import weakref
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.errors import APIError, NoStreamResponseError

_by_connection: weakref.WeakKeyDictionary[NATS, Publisher] = weakref.WeakKeyDictionary()


class Publisher:
    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.prefix = nc.new_inbox() + "."
        self._cut = len(self.prefix)
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        self._n = 0
        self._sub: Any = None

    @classmethod
    async def of(cls, nc: NATS) -> Publisher:
        pub = _by_connection.get(nc)
        if pub is None:
            pub = cls(nc)
            _by_connection[nc] = pub
            pub._sub = await nc.subscribe(pub.prefix + "*", cb=pub._on_ack)
        return pub

    async def _on_ack(self, msg: Any) -> None:
        fut = self._pending.pop(msg.subject[self._cut :], None)
        if fut is None or fut.done():
            return
        if msg.headers and msg.headers.get("Status") == "503":
            fut.set_exception(NoStreamResponseError())
        elif b'"error"' in msg.data:
            err = json.loads(msg.data).get("error") or {}
            fut.set_exception(
                APIError(
                    code=err.get("code"), err_code=err.get("err_code"), description=err.get("description")
                )
            )
        else:
            fut.set_result(msg.data)

    async def publish(
        self, subject: str, data: bytes, headers: dict[str, str] | None = None
    ) -> asyncio.Future[bytes]:
        self._n += 1
        token = str(self._n)
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._pending[token] = fut
        fut.add_done_callback(lambda _f: self._pending.pop(token, None))  # cancelled: forget it
        await self.nc.publish(subject, data, reply=self.prefix + token, headers=headers)
        return fut
