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
from collections.abc import Mapping, Sequence
from typing import Any

from noetl.dsl.errors import (
    ExecutionFinishedError,
    NoSuchEntityError,
    RequestInvalidError,
    SignalNotAwaitedError,
    reply_error,
)
from noetl.dsl.names import execution_id_problem, request_id_problem, signal_name_problem
from noetl.events import subjects as s
from noetl.events.bus import read_execution_events
from noetl.events.envelope import Event, dumps, loads
from noetl.events.ids import execution_id_for
from noetl.events.objects import expand, is_reference, resolve
from noetl.events.port import Bus


async def submit(bus: Bus, request: dict[str, Any]) -> str:
    """Publish an execution request; the same ``request_id`` twice is one execution. Returns the
    execution id, derived from the request id unless the request names one."""
    await bus.publish(s.REQUEST_SUBJECT, dumps(request), msg_id=request["request_id"])
    return str(request.get("execution_id") or execution_id_for(request["request_id"]))


async def _recorded(bus: Bus, execution_id: str) -> bool:
    requested = s.execution_event_filter(execution_id, "playbook.execution.requested")
    return await bus.last(s.EVENTS_STREAM, requested) is not None


async def cancel(
    bus: Bus, execution_id: str, reason: str | None = None, *, principal: str | None = None
) -> dict[str, Any] | None:
    """Publish the cancel request; one id per execution, so repeated cancels are one request.
    None, and nothing published, for an execution that was never requested: a cancel must not
    make a phantom execution appear."""
    if not await _recorded(bus, execution_id):
        return None
    body: dict[str, Any] = {"execution_id": execution_id, "reason": reason or "cancelled by request"}
    if principal:
        body["principal"] = principal  # recorded in execution.cancel.requested: who stopped it
    await bus.publish(s.CANCEL_SUBJECT, dumps(body), msg_id=f"cancel-{execution_id}")
    return {"execution_id": execution_id, "cancel": "requested"}


async def _outside(bus: Bus, subject: str, what: str, body: dict[str, Any]) -> dict[str, Any]:
    """Signal, pause, resume (SEMANTICS §17): refused here, with a reason, for an execution that
    does not exist or has finished; otherwise published for the server to record as an input.
    ``request_id`` (a fresh one unless given) makes a repeated send one request."""
    execution_id = body["execution_id"]
    if problem := execution_id_problem(execution_id):
        return reply_error(RequestInvalidError(problem))
    if not await _recorded(bus, execution_id):
        return reply_error(NoSuchEntityError(f"no execution {execution_id}: check the id (noetl executions)"))
    if await finished_event(bus, execution_id) is not None:
        return reply_error(
            ExecutionFinishedError(f"execution {execution_id} has finished: there is nothing to {what}")
        )
    body = {**body, "request_id": str(body.get("request_id") or uuid.uuid4().hex)}
    if problem := request_id_problem(body["request_id"]):
        return reply_error(RequestInvalidError(problem))
    await bus.publish(subject, dumps(body), msg_id=f"{what}-{body['request_id']}")
    return {"execution_id": execution_id, what: "sent", "request_id": body["request_id"]}


# A signal's data rides in one event: refused here, at once and with a reason, when it could not be
# stored (NATS's 1 MiB) or would exhaust a walk over it (the request payload's depth limit).
MAX_SIGNAL_BYTES = 512 * 1024
MAX_SIGNAL_DEPTH = 64


def signal_data_problem(data: Any) -> str | None:
    """Why ``data`` cannot be a signal's data, or None. Counted without recursion."""
    stack, deepest = [(data, 1)], 0
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict | list):
            deepest = max(deepest, d)
            if deepest > MAX_SIGNAL_DEPTH:
                return f"signal data nests deeper than {MAX_SIGNAL_DEPTH} levels"
            stack.extend((c, d + 1) for c in (v.values() if isinstance(v, dict) else v))
    try:
        size = len(dumps(data))
    except (TypeError, ValueError):
        return "signal data is not JSON"
    if size > MAX_SIGNAL_BYTES:
        return f"signal data is {size} bytes; the limit is {MAX_SIGNAL_BYTES}: pass large data by reference"
    return None


def _by(body: dict[str, Any], principal: str | None) -> dict[str, Any]:
    """The request body naming who sent it: the server records it with the input."""
    return {**body, "principal": principal} if principal else body


async def signal(
    bus: Bus,
    execution_id: str,
    name: str,
    data: Any = None,
    request_id: str | None = None,
    *,
    principal: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Send signal ``name`` with ``data`` to an execution: the first step waiting for it takes it,
    or it waits in the execution's queue for one that will. ``principal``: who sends it (recorded
    in ``signal.received``, and what ``lifecycle.await`` may restrict). A name no step waits for
    and no step of its playbook awaits is refused (a typo would be queued and never taken) unless
    ``force``."""
    if problem := signal_name_problem(name):
        return reply_error(RequestInvalidError(problem))
    if problem := signal_data_problem(data):
        return reply_error(RequestInvalidError(problem))
    sent_before = {"execution_id": execution_id, "signal": "sent", "request_id": request_id}
    if execution_id_problem(execution_id) is None and (request_id or not force):
        events = await read_execution_events(bus, execution_id)
        if request_id and _recorded_signal(events, request_id):
            # sent again (a double click): one signal, answered as the first was, even once finished
            return sent_before
        refused = None if force else _unawaited(events, execution_id, name)
        if refused is not None:
            return refused
    body = {"execution_id": execution_id, "signal": name, "data": data, "request_id": request_id}
    reply = await _outside(bus, s.SIGNAL_SUBJECT, "signal", _by(body, principal))
    # the first send may have been recorded, and ended the execution, between our read and now
    finished = (reply.get("error") or {}).get("kind") == "execution_finished"
    if request_id and finished:
        again = await read_execution_events(bus, execution_id)
        return sent_before if _recorded_signal(again, request_id) else reply
    return reply


def _recorded_signal(events: Sequence[Mapping[str, Any]], request_id: str) -> bool:
    return any(
        e.get("name") == "signal.received" and (e.get("payload") or {}).get("request_id") == request_id
        for e in events
    )


def awaited_signals(events: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]] | None:
    """(names step runs wait for now, names any step of the playbook awaits), or None when the
    playbook's text is not in the request event (too large: the check is then skipped)."""
    from noetl.client.view import waiting_for
    from noetl.dsl.cache import parse_playbook
    from noetl.dsl.errors import NoetlError

    requested = next((e for e in events if e.get("name") == "playbook.execution.requested"), None)
    text = ((requested or {}).get("payload") or {}).get("playbook")
    if not isinstance(text, str):
        return None
    try:
        playbook = parse_playbook(text, "<request>")
    except NoetlError:
        return None
    now = [str(w["signal"]) for w in waiting_for(events)["signals"] if w.get("signal")]
    later = [
        st.lifecycle.await_signal
        for st in playbook.workflow
        if st.lifecycle is not None and st.lifecycle.await_signal
    ]
    return list(dict.fromkeys(now)), list(dict.fromkeys(later))


def _unawaited(events: Sequence[Mapping[str, Any]], execution_id: str, name: str) -> dict[str, Any] | None:
    if not events or any(e.get("name") == "workflow.finished" for e in events):
        return None  # _outside says why: no such execution, or finished
    names = awaited_signals(events)
    if names is None or name in names[0] or name in names[1]:
        return None
    now, later = names
    waits = f"it waits for {', '.join(now)}" if now else "no step waits for a signal now"
    awaits = f"its playbook awaits {', '.join(later)}" if later else "its playbook awaits no signal"
    return reply_error(
        SignalNotAwaitedError(
            f"no step of execution {execution_id} waits for or can await signal {name!r} ({waits}; "
            f"{awaits}): check the name, or send it anyway with --force (HTTP ?force=true)",
            waiting=now,
            awaited=later,
        )
    )


async def pause(
    bus: Bus, execution_id: str, reason: str | None = None, *, principal: str | None = None
) -> dict[str, Any]:
    """Nothing new is scheduled until ``resume``; running step runs finish."""
    body = _by({"execution_id": execution_id, "reason": reason}, principal)
    return await _outside(bus, s.PAUSE_SUBJECT, "pause", body)


async def resume(bus: Bus, execution_id: str, *, principal: str | None = None) -> dict[str, Any]:
    return await _outside(bus, s.RESUME_SUBJECT, "resume", _by({"execution_id": execution_id}, principal))


async def finished_event(bus: Bus, execution_id: str) -> dict[str, Any] | None:
    """The execution's ``workflow.finished``, if it has one yet."""
    done = await bus.last(
        s.EVENTS_STREAM, s.execution_event_filter(execution_id, "workflow.finished")
    )
    return await expand(bus, loads(done.data)) if done is not None else None


class Awaited:
    """One event of an execution a caller waits for. Open it before the request is published, so
    the end of a fast execution cannot be missed: the notice is a subscription, and the stream is
    read once the subscription stands."""

    def __init__(self, bus: Bus, execution_id: str, name: str) -> None:
        self.bus, self.subject = bus, s.execution_event_filter(execution_id, name)
        self._seen: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._sub: Any = None

    @classmethod
    async def open(cls, bus: Bus, execution_id: str, name: str = "playbook.processed") -> Awaited:
        self = cls(bus, execution_id, name)
        self._sub = await self.bus.subscribe(self.subject, self._notice)
        return self

    async def _notice(self, m: Any) -> None:
        if not self._seen.done():
            self._seen.set_result(m.data)

    async def wait(self, timeout: float | None = None) -> dict[str, Any]:
        """The event; ``TimeoutError`` when it has not come within ``timeout`` seconds."""
        try:
            stored = await self.bus.last(s.EVENTS_STREAM, self.subject)
            if stored is not None:
                return await expand(self.bus, loads(stored.data))
            return await expand(self.bus, loads(await asyncio.wait_for(asyncio.shield(self._seen), timeout)))
        finally:
            await self.close()

    async def close(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            await sub.unsubscribe()


async def wait_finished(
    bus: Bus, execution_id: str, timeout: float | None = None, already_subscribed: Awaited | None = None
) -> None:
    """Until the execution is processed (``TimeoutError`` after ``timeout`` seconds)."""
    awaited = already_subscribed or await Awaited.open(bus, execution_id)
    await awaited.wait(timeout)


async def complete_log(bus: Bus, execution_id: str, patience: float = 5.0) -> list[Event]:
    """The execution's events up to ``playbook.processed``.

    A core subscriber can hear of a message before the stream has stored it, so a read right
    after the notification may end a few events short: read again until the last event is there.
    """
    events = await read_execution_events(bus, execution_id)
    waited = 0.0
    while (not events or events[-1].get("name") != "playbook.processed") and waited < patience:
        await asyncio.sleep(0.02)
        waited += 0.02
        events = await read_execution_events(bus, execution_id)
    return events


async def run_and_wait(
    bus: Bus, request: dict[str, Any], timeout: float | None = None
) -> dict[str, Any]:
    from noetl.client.view import execution_output

    execution_id = request.get("execution_id") or execution_id_for(request["request_id"])
    awaited = await Awaited.open(bus, execution_id)
    try:
        await submit(bus, request)
    except BaseException:
        await awaited.close()
        raise
    await awaited.wait(timeout)
    await asyncio.sleep(0)
    out = execution_output(execution_id, await complete_log(bus, execution_id))
    if is_reference(out.get("ctx")):
        out["ctx"] = await resolve(bus, out["ctx"])
    return out
