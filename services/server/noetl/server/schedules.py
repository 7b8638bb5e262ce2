"""Schedule fires into executions (SEMANTICS §18), on whichever replica takes the fire.

NATS fires each schedule's cron definition on ``noetl.timers.fire.<name>``; the shared durable
consumer ``noetl-server-schedules`` hands each fire to one replica, which records an execution
request whose ``request_id`` is ``schedule.<name>.<due time>`` and only then acknowledges the
fire. A fire handled twice (its replica killed before the ack, redelivered to another) derives the
same request id, and the request handler records a request id once: a due time runs exactly once
with any number of replicas and across failovers. Fires roll up in the stream, so after an outage
one missed fire (the latest) is caught up, never a backlog.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime
from typing import Any

from noetl.events import subjects as s
from noetl.events.consume import consume
from noetl.events.envelope import dumps
from noetl.events.ids import execution_id_for
from noetl.events.nats_port import as_bus
from noetl.events.port import Bus, Delivery, QueueConfig
from noetl.events.retry import retrying
from noetl.server.requests import RequestHandler
from noetl.store.schedules import ScheduleStore, fire_time

log = logging.getLogger("noetl.server")

FIRE_ACK_WAIT = 10.0


async def _running(bus: Bus, execution_id: str | None) -> bool:
    if not execution_id:
        return False
    finished = s.execution_event_filter(execution_id, "workflow.finished")
    if await bus.last(s.EVENTS_STREAM, finished) is not None:
        return False
    # recorded at all? (a request refused before its event was stored never runs)
    requested = s.execution_event_filter(execution_id, "playbook.execution.requested")
    return await bus.last(s.EVENTS_STREAM, requested) is not None


async def fire(
    bus: Bus, store: ScheduleStore, requests: RequestHandler, delivery: Delivery
) -> dict[str, Any] | None:
    """One fire: the request it makes (None when the schedule is gone, paused or skipped)."""
    name = delivery.subject.rsplit(".", 1)[-1]
    sch = await store.get(name)
    if sch is None or sch.get("paused"):
        return None
    stamped = datetime.fromtimestamp(delivery.stamp, UTC) if delivery.stamp else datetime.now(UTC)
    due = fire_time(sch, (delivery.headers or {}).get("Nats-Schedule-Next"), stamped).isoformat()
    if sch.get("overlap") == "skip" and await _running(bus, sch.get("last_execution_id")):
        log.info(
            "schedule %s: the fire due %s is skipped (--overlap skip): execution %s still runs",
            name,
            due,
            sch["last_execution_id"],
        )
        await store.record(name, due, None, skipped=True)
        return None
    request_id = f"schedule.{name}.{due}"
    request = {
        "request_id": request_id,
        "path": sch["path"],
        "payload": sch.get("payload") or {},
        "schedule": name,
    }
    if sch.get("version"):
        request["version"] = sch["version"]
    reply = await requests.handle(dumps(request), request_id, scheduled=True)
    await store.record(name, due, reply.get("execution_id") or execution_id_for(request_id))
    return reply


async def fire_loop(bus: Bus | Any, requests: RequestHandler, stopping: asyncio.Event) -> None:
    """Turn schedule fires into execution requests, on whichever replica the queue hands them to."""
    bus = as_bus(bus)
    store = await retrying(lambda: ScheduleStore.open(bus), "opening noetl_schedules")
    config = QueueConfig(
        s.TIMERS_STREAM, s.SCHEDULES_CONSUMER, s.SCHEDULE_FIRE_FILTER, ack_wait=FIRE_ACK_WAIT, max_deliver=-1
    )

    async def handle(d: Delivery) -> None:
        try:
            await retrying(lambda: fire(bus, store, requests, d), "starting a scheduled execution")
        except Exception:
            log.exception("schedule fire on %s failed; it is dropped", d.subject)

    await consume(bus, config, handle, stopping, batch=16, what="schedule fires")
