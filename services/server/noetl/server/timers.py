"""Durable timers (SEMANTICS §16): the engine asks for them, JetStream keeps and fires them.

A timer is a message-schedule definition in ``NOETL_TIMERS`` (``Nats-Schedule: @at <time>``) on
its own subject, ``noetl.timers.at.<execution_id>.<timer_id>``; at the due time NATS itself
publishes its body on ``noetl.timers.due``. No server's memory holds a timer: one armed before a
server was killed fires all the same, and with several replicas it is stored once (the definition's
``Nats-Msg-Id`` is the timer id, and a second definition on the same subject replaces the first).

Any replica records a due timer: the shared durable consumer ``noetl-server-timers`` hands it to
one of them, which writes the ``timer.fired`` input on the execution's partition with an id derived
from the timer id (so a redelivery, or two replicas, store it once) and only then acknowledges it.
The partition's owner decides on it like on any other input; the engine ignores a timer whose run
has already ended.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from noetl.events import subjects as s
from noetl.events.clock import utc_now
from noetl.events.consume import consume
from noetl.events.envelope import dumps, loads, make_event
from noetl.events.ids import derive_id
from noetl.events.port import Bus, Delivery, QueueConfig
from noetl.events.retry import retrying

log = logging.getLogger("noetl.server")

TIMER_ACK_WAIT = 10.0

async def arm(bus: Bus, timers: list[dict[str, Any]]) -> None:
    """Store timer definitions; JetStream publishes each on ``noetl.timers.due`` at its ``at``."""
    for t in timers:
        await bus.publish(
            s.timer_subject(t["execution_id"], t["timer_id"]),
            dumps(t),
            msg_id=f"timer-{t['timer_id']}",
            headers={"Nats-Schedule": f"@at {t['at']}", "Nats-Schedule-Target": s.TIMER_DUE_SUBJECT},
        )


async def disarm(bus: Bus, execution_id: str, timer_ids: list[str] | None = None) -> None:
    """Purge timer definitions (of one execution, or all of it when ``timer_ids`` is None). Nobody
    needs to wait for it (the server runs it in the background): a timer that fires anyway is
    ignored by the engine, so a failed purge is only logged."""
    filters = (
        [s.execution_timers_filter(execution_id)]
        if timer_ids is None
        else [s.timer_subject(execution_id, t) for t in timer_ids]
    )
    for f in filters:
        try:
            await bus.purge(s.TIMERS_STREAM, f)
        except Exception as e:
            log.info("disarming timers %s: %s (a late fire is ignored)", f, e)


def fired_event(timer: dict[str, Any]) -> tuple[str, bytes, str]:
    """The ``timer.fired`` input of a due timer: (subject, data, event id)."""
    execution_id = timer["execution_id"]
    ev = make_event(
        event_id=derive_id(timer["timer_id"], "fired"),
        execution_id=execution_id,
        timestamp=utc_now(),
        source="server",
        name="timer.fired",
        entity_type="step" if timer.get("step_run_id") else "workflow",
        entity_id=timer.get("step_run_id") or execution_id,
        status="in_progress",
        payload={k: v for k, v in timer.items() if k not in ("execution_id", "partition")},
        step_run_id=timer.get("step_run_id"),
    )
    return (
        s.event_subject(int(timer.get("partition") or 0), execution_id, "timer.fired"),
        dumps(ev),
        ev["event_id"],
    )


async def due_loop(bus: Bus, stopping: asyncio.Event) -> None:
    """Record due timers as ``timer.fired`` inputs, on whichever replica the queue hands them to."""
    config = QueueConfig(
        s.TIMERS_STREAM, s.TIMERS_CONSUMER, s.TIMER_DUE_SUBJECT, ack_wait=TIMER_ACK_WAIT, max_deliver=-1
    )

    async def handle(d: Delivery) -> None:
        try:
            subject, data, event_id = fired_event(loads(d.data))
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed timer on %s", d.subject)
            return  # acknowledged: dropped
        await retrying(lambda: bus.publish(subject, data, msg_id=event_id), "recording a due timer")

    await consume(bus, config, handle, stopping, what="due timers")


def uses_timers(playbook: Any) -> bool:
    """Whether an execution of ``playbook`` can have armed a timer (then its end purges them)."""
    policy = (playbook.executor.get("spec") or {}).get("policy") or {}
    return bool((policy.get("defaults") or {}).get("timeouts")) or any(
        step.lifecycle is not None for step in playbook.workflow
    )
