"""Riding out a JetStream leader election: which failures pass by themselves, and retrying them.

On a clustered stream a killed or cut-off leader is replaced in a few seconds (about 7 s measured
on loopback). Meanwhile a publish, an API call or a KV read times out, finds no responders, or is
answered 503 / "cluster not available". None of these says the request was wrong: sent again with
the same ids (a ``Nats-Msg-Id``, a deterministic key) it succeeds once the stream has a leader, and
a repeat of one that did land is dropped by JetStream's duplicate window. Failing the work instead
(nak'ing a command until JetStream stops delivering it, skipping an input) is what lost effects
and left executions stuck; so every I/O whose outcome something depends on goes through
``retrying``, which gives up only on errors that are the request's own fault.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import nats.errors
from nats.js.errors import APIError, NoStreamResponseError

from noetl.events.port import BusUnavailableError

log = logging.getLogger("noetl.retry")

T = TypeVar("T")

_TRANSIENT: tuple[type[BaseException], ...] = (
    BusUnavailableError,  # what crosses the port (``nats_port.port_error``)
    # nats-py's own, as the adapter's internals (streams, puller, outbox) still see them
    TimeoutError,  # nats.errors.TimeoutError and asyncio's are both this one
    nats.errors.NoRespondersError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.FlushTimeoutError,
    NoStreamResponseError,
)
# JetStream API errors that mean "not now" rather than "not this" (nats-server's error codes): the
# cluster is still forming (10004 JSClusterIncomplete), no peer can take a replica yet (10005
# JSClusterNoPeers), the group is not assigned here yet (10007), the meta group or the stream has no
# leader (10008 JSClusterNotAvail, 10009 JSClusterNotLeader), a peer is not a member yet (10040)
_TRANSIENT_ERR_CODES = frozenset({10004, 10005, 10007, 10008, 10009, 10040, 10158})
# 10158 (409 "duplicate message id is in process") is not a refusal: a publish with the same
# ``Nats-Msg-Id`` is being stored right now (ours, sent again after a lost ack, or a redelivered
# command's). Sent again it answers as a duplicate of the stored one; treating it as a failure made
# a worker nak its command and run the tool a second time (duplicate effects without a crash).


def is_transient(e: BaseException) -> bool:
    if isinstance(e, _TRANSIENT):
        return True
    if isinstance(e, APIError):
        code, err_code = getattr(e, "code", None), getattr(e, "err_code", None)
        if err_code:
            return err_code in _TRANSIENT_ERR_CODES
        return code in (408, 503)  # a status without a JetStream error: no responders, a time-out
    return False


def describe(e: BaseException) -> str:
    text = str(e) or ""
    if isinstance(e, APIError) and getattr(e, "description", None):
        text = f"{e.code} {e.description}"
    return f"{type(e).__name__}{': ' + text if text else ''}"


class Backoff:
    """The delay before the next try: ``first``, doubling up to ``most`` while tries keep failing,
    and ``first`` again once a try lasted ``healthy_after`` seconds (a loop that ran a while before
    it broke is not failing quickly). The one back-off of ``retrying`` and of the server's loops."""

    def __init__(self, first: float = 0.1, most: float = 2.0, healthy_after: float | None = None) -> None:
        self.first, self.most, self.healthy_after = first, most, healthy_after
        self.delay = first

    def next(self, lasted: float | None = None) -> float:
        """The delay to wait now (``lasted``: how long the failed try ran)."""
        if self.healthy_after is not None and lasted is not None and lasted >= self.healthy_after:
            self.delay = self.first
        delay = self.delay
        self.delay = min(self.delay * 2, self.most)
        return delay

    @property
    def upcoming(self) -> float:
        return self.delay


async def retrying(
    fn: Callable[[], Awaitable[T]],
    what: str,
    *,
    deadline: float | None = None,
    first_delay: float = 0.1,
    max_delay: float = 2.0,
    also: tuple[type[BaseException], ...] = (),
    never: tuple[type[BaseException], ...] = (),
) -> T:
    """``fn()`` until it succeeds or fails for a reason of its own; ``deadline`` (loop time) bounds
    the waiting for callers that have something better to do than wait (a one-shot CLI call).
    ``also`` names more failures to wait out where the caller knows a retry is safe: a read, or a
    stream just created that another node does not show yet (404); ``never`` failures no retry
    can change, raised at once even when ``also`` covers them (``BusRefusedError``)."""
    loop = asyncio.get_running_loop()
    backoff = Backoff(first_delay, max_delay)
    attempt = 0
    while True:
        try:
            return await fn()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if (
                isinstance(e, never)
                or not (is_transient(e) or isinstance(e, also))
                or (deadline is not None and loop.time() + backoff.upcoming >= deadline)
            ):
                raise
            attempt += 1
            delay = backoff.next()
            # the first retries are routine during an election: say so once it lasts
            (log.warning if attempt >= 3 else log.info)(
                "%s: %s; retrying in %.1f s", what, describe(e), delay
            )
            await asyncio.sleep(delay)
