"""Client side of an execution: publish a request and wait for its ``workflow.finished``.

The subscription to the finish subject is made before the request is published, so the end of a
fast execution cannot be missed; the stream is read afterwards to rebuild the whole output.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.aio.client import Client as NATS

from noetl.events import subjects as s
from noetl.events.bus import read_execution_events, read_messages
from noetl.events.envelope import dumps
from noetl.events.ids import execution_id_for
from noetl.events.objects import is_reference, resolve


async def wait_finished(
    nc: NATS, execution_id: str, timeout: float | None = None, already_subscribed: Any = None
) -> None:
    js = nc.jetstream()
    sub = already_subscribed or await nc.subscribe(
        s.execution_event_filter(execution_id, "playbook.processed")
    )
    try:
        if await read_messages(
            js, s.EVENTS_STREAM, [s.execution_event_filter(execution_id, "playbook.processed")]
        ):
            return
        await sub.next_msg(timeout=timeout if timeout else 10**9)
    finally:
        await sub.unsubscribe()


async def complete_log(js: Any, execution_id: str, patience: float = 5.0) -> list[dict[str, Any]]:
    """The execution's events up to ``playbook.processed``.

    A core subscriber can hear of a message before the stream has stored it, so a read right
    after the notification may end a few events short: read again until the last event is there.
    """
    events = await read_execution_events(js, execution_id)
    waited = 0.0
    while (not events or events[-1].get("name") != "playbook.processed") and waited < patience:
        await asyncio.sleep(0.02)
        waited += 0.02
        events = await read_execution_events(js, execution_id)
    return events


async def run_and_wait(nc: NATS, request: dict[str, Any], timeout: float | None = None) -> dict[str, Any]:
    from noetl.cli.output import execution_output

    js = nc.jetstream()
    execution_id = request.get("execution_id") or execution_id_for(request["request_id"])
    sub = await nc.subscribe(s.execution_event_filter(execution_id, "playbook.processed"))
    await js.publish(s.REQUEST_SUBJECT, dumps(request), headers={"Nats-Msg-Id": request["request_id"]})
    await wait_finished(nc, execution_id, timeout, already_subscribed=sub)
    await asyncio.sleep(0)
    out = execution_output(execution_id, await complete_log(js, execution_id))
    if is_reference(out.get("ctx")):
        out["ctx"] = await resolve(js, out["ctx"])
    return out
