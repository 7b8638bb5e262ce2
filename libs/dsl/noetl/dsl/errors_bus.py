"""The transport's branch of the error tree (``noetl.dsl.errors``): the bus port's failures, which
its adapters raise in place of the client library's own, and a message that is not one of ours.

Kept apart only for size; ``noetl.dsl.errors`` imports every class here, and that is where callers
take them from (or from ``noetl.events.port``, which names the port's).
"""

from __future__ import annotations

from noetl.dsl.errors import NoetlError


class WireError(NoetlError, ValueError):
    """A message that is not an event or command this process can read: malformed JSON, a
    missing or mistyped envelope field, or a ``schema_version`` newer than it knows (``newer``)."""

    kind = "wire_invalid"

    def __init__(self, message: str, *, newer: bool = False) -> None:
        super().__init__(message)
        self.newer = newer


class BusError(NoetlError):
    """A transport failure of the bus port, raised by its adapters (NATS, the in-memory twin)
    in place of the client library's own errors."""

    kind = "bus_error"


class BusUnavailableError(BusError):
    """Not now, not this request's fault: a time-out, no responder, a reconnecting connection,
    a stream or cluster without a leader (an election takes seconds). The same request sent again
    with the same ids succeeds once the bus is back, and a repeat of one that did land is dropped
    by the duplicate window, so callers wait these out (``noetl.events.retry``)."""

    kind = "bus_unavailable"
    retryable = True


class NoStreamError(BusError):
    """No stream takes the subject: the publish can never succeed until one is declared."""

    kind = "no_stream"


class BusRefusedError(BusError):
    """The message can never be stored as it is (over ``max_payload``, a subject or size the
    stream refuses): retrying it only stalls whoever waits behind it."""

    kind = "bus_refused"


class ReaderLostError(BusError):
    """A reader cannot go on without skipping a message: read again after the last one taken."""

    kind = "reader_lost"


class KeyExistsError(BusError):
    """``create`` of a key that has a value."""

    kind = "key_exists"


class RevisionMismatchError(BusError):
    """``update`` with a revision that is not the key's last one."""

    kind = "revision_mismatch"


class PullRefusedError(BusError):
    """The server refused or cut off our pull requests (a 409 or 400 status): the caller backs off."""

    kind = "pull_refused"
