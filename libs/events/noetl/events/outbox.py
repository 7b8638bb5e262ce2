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
under the same ``Nats-Msg-Id`` so the stream keeps one copy. The one gap left is a replicated
stream changing its leader between two of our messages: the old leader may drop a plain message
the new one never saw, while the later ack comes from the new leader. So with ``ack_all`` (every
deployment whose streams have more than one replica) every message asks for its ack, and a
message whose ack does not come is published again like the rest.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client as NATS

from noetl.events.bus import publish_all
from noetl.events.publisher import Publisher


class Outbox:
    def __init__(
        self, nc: NATS, *, confirm_every: int | None = 64, timeout: float = 10.0, ack_all: bool = False
    ) -> None:
        self.nc = nc
        self.confirm_every, self.timeout, self.ack_all = confirm_every, timeout, ack_all
        self._sent: list[tuple[str, bytes, str]] = []
        self._acks: list[asyncio.Future[Any]] = []
        self._plain = 0  # plain messages since the last one with a reply
        self._reconnects = 0
        self._resend = False  # something since the last confirmation may not have reached the stream

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        """Publish now; ``ack`` asks for an acknowledgement, which ``confirm()`` waits for. A
        message that could not even be sent stays on the list: ``confirm()`` sends it again."""
        if not self._sent:
            self._reconnects = self.nc.stats["reconnects"]
        self._sent.append((subject, data, msg_id))
        bound = self.confirm_every is not None and self._plain >= self.confirm_every
        try:
            if ack or bound or self.ack_all:
                await self._send_acked(subject, data, msg_id)
                if bound and not (ack or self.ack_all):
                    await self.confirm()  # a long run does not keep every message it sent
            else:
                await self.nc.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
                self._plain += 1
        except Exception:
            self._resend = True
            raise

    async def _send_acked(self, subject: str, data: bytes, msg_id: str) -> None:
        pub = await Publisher.of(self.nc)
        self._acks.append(await pub.publish(subject, data, {"Nats-Msg-Id": msg_id}))
        self._plain = 0

    async def confirm(self) -> None:
        """Every message sent so far is stored, or this raises; calling it again after a failure
        (a leader election, a reconnect) publishes them all again under their ids until it holds."""
        if not self._sent:
            return
        if not self._resend:
            if self._plain:
                # nothing after the last plain messages proves them stored: send the last one again
                # with a reply (a repeat is dropped by its id, and its ack comes after them all)
                try:
                    await self._send_acked(*self._sent[-1])
                except Exception:
                    self._resend = True
            acks, self._acks = self._acks, []
            try:
                await asyncio.wait_for(asyncio.gather(*acks), self.timeout)
                self._resend = self._resend or self.nc.stats["reconnects"] != self._reconnects
            except Exception:
                for f in acks:
                    f.cancel()
                self._resend = True  # a lost ack or a refused message: settle each one
        if self._resend:
            await publish_all(self.nc.jetstream(), self._sent, self.timeout)
        self._sent.clear()
        self._acks.clear()
        self._plain = 0
        self._resend = False
