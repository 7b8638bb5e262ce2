"""Publishing the messages of one run in order, confirmed by the acknowledgement of the last.

A JetStream publish with a reply subject costs the client and nats-server an acknowledgement
message each. For messages going to one stream over one connection that is more than needed:
nats-server reads a connection's messages in order and a stream stores its inbound messages
in order, so when a later message's ack arrives, every earlier one of ours has been through the
stream. Here only every ``confirm_every``-th message and the one a caller marks ``confirm``
carry a reply; the others go out plain and are kept until a later ack covers them.

Only a broken connection can lose a message in between. That shows as a reconnect, and then
everything not yet confirmed is published again, acknowledged one by one, under the same
``Nats-Msg-Id`` so the stream keeps one copy. The one gap left is a clustered stream losing its
leader between two of our messages. Use this only for messages whose loss no decision depends on
(docs/guarantees.md): a worker's ``step.started``/``task.*`` events before its terminal event,
which is confirmed.
"""

from __future__ import annotations

import asyncio

from nats.aio.client import Client as NATS

from noetl.events.bus import publish_all
from noetl.events.publisher import Publisher


class Outbox:
    def __init__(self, nc: NATS, *, confirm_every: int = 64, timeout: float = 10.0) -> None:
        self.nc = nc
        self.confirm_every, self.timeout = confirm_every, timeout
        self._unconfirmed: list[tuple[str, bytes, str]] = []
        self._reconnects = 0

    async def send(self, subject: str, data: bytes, msg_id: str, *, confirm: bool = False) -> None:
        """Publish now; with ``confirm`` (or every ``confirm_every`` messages) wait until stored."""
        if not self._unconfirmed:
            self._reconnects = self.nc.stats["reconnects"]
        self._unconfirmed.append((subject, data, msg_id))
        if confirm or len(self._unconfirmed) >= self.confirm_every:
            await self._confirm()
        else:
            await self.nc.publish(subject, data, headers={"Nats-Msg-Id": msg_id})

    async def _confirm(self) -> None:
        pub = await Publisher.of(self.nc)
        subject, data, msg_id = self._unconfirmed[-1]
        fut = await pub.publish(subject, data, {"Nats-Msg-Id": msg_id})
        try:
            await asyncio.wait_for(fut, self.timeout)
        except Exception:
            # a lost ack or a refused message: settle each one (raises when one cannot be stored)
            await publish_all(self.nc.jetstream(), self._unconfirmed, self.timeout)
        else:
            if self.nc.stats["reconnects"] != self._reconnects:
                await publish_all(self.nc.jetstream(), self._unconfirmed, self.timeout)
        self._unconfirmed.clear()
