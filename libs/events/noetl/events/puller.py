"""Reading a pull consumer with requests kept outstanding, the way nats.go's ``Consume`` does.

Asking for messages only when the caller wants them costs a round trip per read: a sequential
path (a chain of steps, a sequential loop) then pays one extra request-and-reply per hop on both
the server and the worker. Instead this reader keeps *credit* at the server, pull requests for up
to ``batch`` messages with a long expiry, and tops it up when half of it has been used. Messages
are handed over the moment they arrive, and a burst arrives in one read. The caller says how
many messages it has room for (a worker: its free slots), and the credit never exceeds that room,
so a busy worker does not hoard commands another worker could run.

A request ends when it has delivered its batch or when it expires. The server then sends a status
with the number it did not deliver (``Nats-Pending-Messages``), which is given back. Requests lost
without a status (a nats-server restart, a reconnect) are noticed by a missed heartbeat, by the
connection's reconnect count, or by their deadline passing, and the credit is requested anew.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from typing import Any

from nats.aio.client import Client as NATS
from nats.aio.msg import Msg

from noetl.dsl.errors import PullRefusedError as PullRefusedError
from noetl.events.envelope import dumps
from noetl.events.retry import describe, retrying
from noetl.events.subjects import consumer_next_subject

log = logging.getLogger("noetl.puller")

# statuses that end a pull request normally: its batch or its time is used up
_ENDED = {"404", "408"}
_HEARTBEAT = "100"


class Puller:
    def __init__(
        self,
        nc: NATS,
        stream: str,
        consumer: str,
        *,
        batch: int = 64,
        expires: float = 30.0,
        heartbeat: float = 5.0,
        pending_bytes_limit: int | None = None,
    ) -> None:
        if heartbeat * 2 >= expires:
            raise ValueError(f"heartbeat {heartbeat} s must be less than half of expires {expires} s")
        self.nc = nc
        self.subject = consumer_next_subject(stream, consumer)
        self.inbox = nc.new_inbox()
        self.batch, self.expires, self.heartbeat = batch, expires, heartbeat
        self._pending_bytes_limit = pending_bytes_limit
        self._sub: Any = None
        self._buf: collections.deque[Msg] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._credit = 0  # messages asked for and not yet delivered or given back
        self._deadline = 0.0  # by then every outstanding request has ended, one way or another
        self._last_heard = 0.0  # last message or status from the server on our inbox
        self._reconnects = 0
        self._error: PullRefusedError | None = None
        self.requests = 0  # pull requests sent, for tests and benchmarks

    async def start(self) -> Puller:
        kw: dict[str, Any] = {}
        if self._pending_bytes_limit is not None:
            kw["pending_bytes_limit"] = self._pending_bytes_limit
        self._sub = await self.nc.subscribe(self.inbox, cb=self._on_msg, **kw)
        self._reconnects = self.nc.stats["reconnects"]
        return self

    async def stop(self, *, nak: bool = False) -> None:
        """Stop receiving. ``nak`` hands the messages delivered to us that no caller took back to
        the consumer at once, rather than after their ack wait (explicit-ack consumers only)."""
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None
        left = list(self._buf) if nak else []
        self._buf.clear()
        self._credit = 0
        for m in left:
            with contextlib.suppress(Exception):
                await m.nak()

    async def _on_msg(self, msg: Msg) -> None:
        loop = asyncio.get_running_loop()
        self._last_heard = loop.time()
        headers = msg.headers or {}
        status = headers.get("Status")
        if status is None:
            self._credit = max(self._credit - 1, 0)
            self._buf.append(msg)
        elif status != _HEARTBEAT:
            pending = headers.get("Nats-Pending-Messages")
            # without the count (an old server, a deleted consumer) nothing is known: start from zero
            self._credit = max(self._credit - int(pending), 0) if pending is not None else 0
            if status not in _ENDED:
                # nats-py keys the description with its Header enum, not a plain string
                desc = next((v for k, v in headers.items() if getattr(k, "value", k) == "Description"), "")
                ended = f"pull request on {self.subject} ended with {status} {desc}".strip()
                self._error = PullRefusedError(ended)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _check_lost(self, now: float) -> None:
        """Requests the server no longer has cannot deliver: forget their credit."""
        if not self._credit:
            return
        reconnects = self.nc.stats["reconnects"]
        if (
            reconnects != self._reconnects
            or now > self._deadline
            or now - self._last_heard > 2.5 * self.heartbeat
        ):
            self._reconnects = reconnects
            self._credit = 0

    async def _top_up(self, room: int, now: float) -> None:
        target = min(room, self.batch)
        want = target - self._credit - len(self._buf)
        if want <= 0 or (self._credit and want < max(1, target // 2)):
            return
        req = {"batch": want, "expires": int(self.expires * 1e9), "idle_heartbeat": int(self.heartbeat * 1e9)}
        self._credit += want
        self._deadline = now + self.expires + self.heartbeat
        if self.requests == 0 or self._last_heard < now - self.heartbeat:
            self._last_heard = now  # the heartbeat clock starts with the first request after a silence
        self.requests += 1
        await self.nc.publish(self.subject, dumps(req), reply=self.inbox)

    async def fetch(self, max_msgs: int, wait: float = 1.0) -> list[Msg]:
        """Between 1 and ``max_msgs`` messages, or [] after ``wait`` seconds without any.

        ``max_msgs`` is the caller's room: credit is only asked for up to it.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + wait
        while not self._buf:
            if self._error is not None:
                err, self._error = self._error, None
                raise err
            now = loop.time()
            self._check_lost(now)
            await self._top_up(max_msgs, now)
            left = end - now
            if left <= 0:
                return []
            self._waiter = loop.create_future()
            try:
                await asyncio.wait_for(self._waiter, min(left, self.heartbeat))
            except TimeoutError:
                pass
            finally:
                self._waiter = None
        n = min(max_msgs, len(self._buf))
        out = [self._buf.popleft() for _ in range(n)]
        await self._top_up(max_msgs - n, loop.time())
        return out


def _ack_tokens(msg: Msg) -> tuple[list[str], int]:
    """The ack subject's tokens and the offset of the stream name in them.

    ``$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>``, or with
    a domain and an account hash before the stream (12 tokens or more). Read directly: nats-py's
    ``msg.metadata`` builds a whole object with a datetime for the one number a caller wants.
    """
    tokens = msg.reply.split(".")
    return tokens, (2 if len(tokens) == 9 else 4)


def delivered(msg: Msg) -> int:
    """How many times JetStream has delivered this message (1 on the first delivery)."""
    tokens, at = _ack_tokens(msg)
    return int(tokens[at + 2])


def stream_sequence(msg: Msg) -> int:
    tokens, at = _ack_tokens(msg)
    return int(tokens[at + 3])


def consumer_sequence(msg: Msg) -> int:
    """The consumer's own count of deliveries: consecutive unless messages were lost on the way
    (an ordered reader recreates its consumer at the first gap)."""
    tokens, at = _ack_tokens(msg)
    return int(tokens[at + 4])


async def ack_stored(msg: Msg, what: str, *, patience: float = 30.0) -> bool:
    """Acknowledge and wait until JetStream confirms it: a plain ack sent while the consumer elects
    a leader is lost, and the message comes back after its ack wait to be handled again (harmless,
    ids are deterministic, but a command would run twice). A repeated ack is answered too, so the
    retries are safe. False when ``patience`` ran out: the message will be redelivered."""
    loop = asyncio.get_running_loop()
    try:
        await retrying(lambda: msg.ack_sync(timeout=2.0), what, deadline=loop.time() + patience)
        return True
    except Exception as e:
        log.warning("%s: not confirmed (%s); JetStream will deliver it again", what, describe(e))
        return False
