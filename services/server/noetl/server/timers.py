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
import contextlib
import logging
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig

from noetl.events import subjects as s
from noetl.events.bus import publish_all
from noetl.events.clock import utc_now
from noetl.events.envelope import dumps, loads, make_event
from noetl.events.ids import derive_id
from noetl.events.publisher import Publisher, ignore_result
from noetl.events.puller import consume
from noetl.events.retry import retrying

log = logging.getLogger("noetl.server")

TIMER_ACK_WAIT = 10.0


async def arm(js: Any, timers: list[dict[str, Any]]) -> None:
    """Store timer definitions; JetStream publishes each on ``noetl.timers.due`` at its ``at``."""
    for t in timers:
        await js.publish(
            s.timer_subject(t["execution_id"], t["timer_id"]),
            dumps(t),
            headers={
                "Nats-Schedule": f"@at {t['at']}",
                "Nats-Schedule-Target": s.TIMER_DUE_SUBJECT,
                "Nats-Msg-Id": f"timer-{t['timer_id']}",
            },
        )


async def disarm(nc: NATS, execution_id: str, timer_ids: list[str] | None = None) -> None:
    """Purge timer definitions (of one execution, or all of it when ``timer_ids`` is None). Not
    awaited: a timer that fires anyway is ignored by the engine."""
    pub = await Publisher.of(nc)
    filters = (
        [s.execution_timers_filter(execution_id)]
        if timer_ids is None
        else [s.timer_subject(execution_id, t) for t in timer_ids]
    )
    for f in filters:
        with contextlib.suppress(Exception):
            fut = await pub.publish(s.stream_purge_subject(s.TIMERS_STREAM), dumps({"filter": f}))
            fut.add_done_callback(ignore_result)


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


async def due_loop(nc: NATS, stopping: asyncio.Event) -> None:
    """Record due timers as ``timer.fired`` inputs, on whichever replica the consumer picks."""
    js = nc.jetstream()
    config = ConsumerConfig(
        durable_name=s.TIMERS_CONSUMER,
        filter_subject=s.TIMER_DUE_SUBJECT,
        ack_policy=AckPolicy.EXPLICIT,
        ack_wait=TIMER_ACK_WAIT,
        max_deliver=-1,
    )

    async def handle(m: Any) -> None:
        try:
            fired = fired_event(loads(m.data))
        except (ValueError, KeyError, TypeError):
            log.warning("ignored a malformed timer on %s", m.subject)
            return  # acknowledged: dropped
        await retrying(lambda: publish_all(js, [fired]), "recording a due timer")

    await consume(nc, s.TIMERS_STREAM, config, handle, stopping, what="due timers")


def uses_timers(playbook: Any) -> bool:
    """Whether an execution of ``playbook`` can have armed a timer (then its end purges them)."""
    policy = (playbook.executor.get("spec") or {}).get("policy") or {}
    return bool((policy.get("defaults") or {}).get("timeouts")) or any(
        step.lifecycle is not None for step in playbook.workflow
    )
