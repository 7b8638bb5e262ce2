"""Client side of an execution: ``submit`` a request, ``wait`` for its end, ``cancel`` it, or
``run_and_wait`` for all of it. The CLI, the HTTP and NATS APIs and the ``playbook`` tool use these
and nothing else, so requests carry one id discipline (``Nats-Msg-Id`` = request id, one cancel id
per execution) and every caller follows an execution the same way.

The subscription to the finish subject is made before the request is published, so the end of a
fast execution cannot be missed; the stream is read afterwards to rebuild the whole output.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.errors import NotFoundError

from noetl.dsl.errors import (
    ExecutionFinishedError,
    NoSuchEntityError,
    RequestInvalidError,
    reply_error,
)
from noetl.dsl.names import execution_id_problem, request_id_problem, signal_name_problem
from noetl.events import subjects as s
from noetl.events.bus import read_execution_events, read_messages
from noetl.events.envelope import dumps
from noetl.events.ids import execution_id_for
from noetl.events.objects import is_reference, resolve


async def submit(js: Any, request: dict[str, Any]) -> str:
    """Publish an execution request; the same ``request_id`` twice is one execution. Returns the
    execution id, derived from the request id unless the request names one."""
    await js.publish(s.REQUEST_SUBJECT, dumps(request), headers={"Nats-Msg-Id": request["request_id"]})
    return str(request.get("execution_id") or execution_id_for(request["request_id"]))


async def cancel(js: Any, execution_id: str, reason: str | None = None) -> dict[str, Any] | None:
    """Publish the cancel request; one id per execution, so repeated cancels are one request.
    None, and nothing published, for an execution that was never requested: a cancel must not
    make a phantom execution appear."""
    try:
        await js.get_last_msg(
            s.EVENTS_STREAM, s.execution_event_filter(execution_id, "playbook.execution.requested")
        )
    except NotFoundError:
        return None
    body = {"execution_id": execution_id, "reason": reason or "cancelled by request"}
    await js.publish(s.CANCEL_SUBJECT, dumps(body), headers={"Nats-Msg-Id": f"cancel-{execution_id}"})
    return {"execution_id": execution_id, "cancel": "requested"}


async def _outside(js: Any, subject: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
    """Signal, pause, resume (SEMANTICS §17): refused here, with a reason, for an execution that
    does not exist or has finished; otherwise published for the server to record as an input.
    ``request_id`` (a fresh one unless given) makes a repeated send one request."""
    execution_id = body["execution_id"]
    if problem := execution_id_problem(execution_id):
        return reply_error(RequestInvalidError(problem))
    try:
        await js.get_last_msg(
            s.EVENTS_STREAM, s.execution_event_filter(execution_id, "playbook.execution.requested")
        )
    except NotFoundError:
        return reply_error(NoSuchEntityError(f"no execution {execution_id}: check the id (noetl executions)"))
    if await finished_event(js, execution_id) is not None:
        return reply_error(
            ExecutionFinishedError(f"execution {execution_id} has finished: there is nothing to {what}")
        )
    body = {**body, "request_id": str(body.get("request_id") or uuid.uuid4().hex)}
    if problem := request_id_problem(body["request_id"]):
        return reply_error(RequestInvalidError(problem))
    await js.publish(subject, dumps(body), headers={"Nats-Msg-Id": f"{what}-{body['request_id']}"})
    return {"execution_id": execution_id, what: "sent", "request_id": body["request_id"]}


async def signal(
    js: Any, execution_id: str, name: str, data: Any = None, request_id: str | None = None
) -> dict[str, Any]:
    """Send signal ``name`` with ``data`` to an execution: the first step waiting for it takes it,
    or it waits in the execution's queue for one that will."""
    if problem := signal_name_problem(name):
        return reply_error(RequestInvalidError(problem))
    body = {"execution_id": execution_id, "signal": name, "data": data, "request_id": request_id}
    return await _outside(js, s.SIGNAL_SUBJECT, "signal", body)


async def pause(js: Any, execution_id: str, reason: str | None = None) -> dict[str, Any]:
    """Nothing new is scheduled until ``resume``; running step runs finish."""
    return await _outside(js, s.PAUSE_SUBJECT, "pause", {"execution_id": execution_id, "reason": reason})


async def resume(js: Any, execution_id: str) -> dict[str, Any]:
    return await _outside(js, s.RESUME_SUBJECT, "resume", {"execution_id": execution_id})


async def finished_event(js: Any, execution_id: str) -> dict[str, Any] | None:
    """The execution's ``workflow.finished``, if it has one yet."""
    subject = s.execution_event_filter(execution_id, "workflow.finished")
    done = await read_messages(js, s.EVENTS_STREAM, [subject])
    return done[-1][1] if done else None


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
    from noetl.client.view import execution_output

    js = nc.jetstream()
    execution_id = request.get("execution_id") or execution_id_for(request["request_id"])
    sub = await nc.subscribe(s.execution_event_filter(execution_id, "playbook.processed"))
    await submit(js, request)
    await wait_finished(nc, execution_id, timeout, already_subscribed=sub)
    await asyncio.sleep(0)
    out = execution_output(execution_id, await complete_log(js, execution_id))
    if is_reference(out.get("ctx")):
        out["ctx"] = await resolve(js, out["ctx"])
    return out
