"""One event writer: an event is built, encoded once, sized from those bytes, and sent with them.

Writers used to JSON-encode a payload to see whether it fit and then encode the whole event again
to send it: the largest part of the biggest messages encoded twice. Here the bytes that are sized
are the bytes that go out. Only an event whose encoding is already past its payload limit pays for
a second, envelope-only encoding, to tell the payload's share of those bytes exactly (the limit has
always been on the payload, not on the envelope around it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from noetl.events import subjects as s
from noetl.events.clock import utc_now
from noetl.events.envelope import EntityType, Event, EventName, Source, Status, dumps, make_event
from noetl.events.port import EventOutbox

_EMPTY = len(dumps({}))


class Encoded(NamedTuple):
    """An event as it is published: its subject, its bytes and its id (``Nats-Msg-Id``)."""

    subject: str
    data: bytes
    msg_id: str


@dataclass(frozen=True)
class PayloadLimit:
    """A payload over ``max_bytes`` is never sent: ``replace`` gets the event and its payload's
    size and returns the event to send instead (a failed twin, a summary with a reference)."""

    max_bytes: int
    replace: Callable[[Event, int], Event]


def payload_size(event: Event, data: bytes) -> int:
    """The bytes of ``event``'s payload inside ``data``, its encoding: JSON is a concatenation,
    so it is the whole less the envelope around an empty payload."""
    return len(data) - len(dumps({**event, "payload": {}})) + _EMPTY


def encode(event: Event, partition: int, limit: PayloadLimit | None = None) -> Encoded:
    """``event`` encoded once; over ``limit`` the replacement is encoded instead."""
    data = dumps(event)
    # the payload is part of the bytes: under the limit as a whole, it is under it alone
    if limit is not None and len(data) > limit.max_bytes:
        n_bytes = payload_size(event, data)
        if n_bytes > limit.max_bytes:
            event = limit.replace(event, n_bytes)
            data = dumps(event)
    return Encoded(s.event_subject(partition, event["execution_id"], event["name"]), data, event["event_id"])


class EventWriter:
    """The events of one execution (or one step run of it) from one source, to one outbox: the
    correlation fields every event of theirs carries are given once."""

    def __init__(
        self,
        outbox: EventOutbox,
        *,
        source: Source,
        execution_id: str,
        partition: int = 0,
        step_run_id: str | None = None,
        parent_execution_id: str | None = None,
        trace_id: str | None = None,
    ) -> None:
        self.outbox, self.source, self.partition = outbox, source, partition
        self.execution_id, self.step_run_id = execution_id, step_run_id
        self.parent_execution_id, self.trace_id = parent_execution_id, trace_id

    def build(
        self,
        *,
        event_id: str,
        name: EventName,
        entity_type: EntityType,
        entity_id: str,
        status: Status,
        payload: dict[str, Any],
        task_run_id: str | None = None,
    ) -> Event:
        return make_event(
            event_id=event_id,
            timestamp=utc_now(),
            source=self.source,
            name=name,
            entity_type=entity_type,
            entity_id=entity_id,
            status=status,
            payload=payload,
            task_run_id=task_run_id,
            execution_id=self.execution_id,
            step_run_id=self.step_run_id,
            parent_execution_id=self.parent_execution_id,
            trace_id=self.trace_id,
        )

    async def send(self, event: Event, *, ack: bool = False, limit: PayloadLimit | None = None) -> None:
        """Publish ``event`` (or its replacement over ``limit``); ``ack`` asks the outbox for an
        acknowledgement (``EventOutbox.send``)."""
        out = encode(event, self.partition, limit)
        await self.outbox.send(out.subject, out.data, out.msg_id, ack=ack)

    async def confirm(self) -> None:
        await self.outbox.confirm()
