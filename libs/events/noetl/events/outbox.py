"""Publishing messages in order, with acknowledgements only where they prove something.

A JetStream publish with a reply subject costs the client and nats-server an acknowledgement
message each. For messages going to one stream over one connection that is more than needed:
nats-server reads a connection's messages in order and a stream stores its inbound messages in
order, so when a later message's ack arrives, every earlier one of ours to that stream has been
through it. Here a message carries a reply only when the caller asks (``ack=True``: the last of a
run or batch per stream, and messages someone waits for) or after ``confirm_every`` plain ones;
``confirm()`` waits for those acks.

Only a broken connection can lose a plain message before a later ack. That shows as a reconnect,
and then everything sent since the last confirmation is published again, acknowledged one by one,
under the same ``Nats-Msg-Id`` so the stream keeps one copy. The one gap left is a clustered
stream losing its leader between two of our messages, so only messages whose loss no decision
depends on go plain (docs/guarantees.md): a worker's ``step.started``/``task.*`` events before
its terminal event, the server's events other than the ones clients wait for.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client as NATS

from noetl.events.bus import publish_all
from noetl.events.publisher import Publisher


class Outbox:
    def __init__(self, nc: NATS, *, confirm_every: int | None = 64, timeout: float = 10.0) -> None:
        self.nc = nc
        self.confirm_every, self.timeout = confirm_every, timeout
        self._sent: list[tuple[str, bytes, str]] = []
        self._acks: list[asyncio.Future[Any]] = []
        self._plain = 0  # plain messages since the last one with a reply
        self._reconnects = 0

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        """Publish now; ``ack`` asks for an acknowledgement, which ``confirm()`` waits for."""
        if not self._sent:
            self._reconnects = self.nc.stats["reconnects"]
        self._sent.append((subject, data, msg_id))
        bound = self.confirm_every is not None and self._plain >= self.confirm_every
        if ack or bound:
            await self._send_acked(subject, data, msg_id)
            if bound and not ack:
                await self.confirm()  # a long run does not keep every message it sent
        else:
            await self.nc.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
            self._plain += 1

    async def _send_acked(self, subject: str, data: bytes, msg_id: str) -> None:
        pub = await Publisher.of(self.nc)
        self._acks.append(await pub.publish(subject, data, {"Nats-Msg-Id": msg_id}))
        self._plain = 0

    async def confirm(self) -> None:
        """Every message sent so far is stored, or this raises (the caller retries the work)."""
        if not self._sent:
            return
        if self._plain:
            # nothing after the last plain messages proves them stored: send the last one again with
            # a reply (a repeat is dropped by its id, and its ack comes after the stream saw them all)
            await self._send_acked(*self._sent[-1])
        try:
            await asyncio.wait_for(asyncio.gather(*self._acks), self.timeout)
            lost = self.nc.stats["reconnects"] != self._reconnects
        except Exception:
            for f in self._acks:
                f.cancel()
            lost = True  # a lost ack or a refused message: settle each one
        if lost:
            await publish_all(self.nc.jetstream(), self._sent, self.timeout)
        self._sent.clear()
        self._acks.clear()
