"""Requests about an execution that runs: cancel, and the outside world's signal, pause and resume,
recorded as engine inputs; and the answer to a request that cannot even be recorded.
Part of ``RequestHandler`` (``noetl.server.requests``).
"""

from __future__ import annotations

import logging
from typing import Any

from noetl.dsl.errors import (
    ExecutionFinishedError,
    NoSuchEntityError,
    RequestInvalidError,
    reply_error,
)
from noetl.dsl.names import (
    execution_id_problem,
    request_id_problem,
    signal_name_problem,
)
from noetl.events import subjects as s
from noetl.events import vocabulary as vocab
from noetl.events.clock import utc_now
from noetl.events.envelope import (
    EventName,
    dumps,
    loads,
    make_event,
)
from noetl.events.ids import derive_id, execution_id_for
from noetl.events.port import store_all
from noetl.server.requests_checks import RequestChecks, _principal_name

log = logging.getLogger("noetl.server")


def _max_signals() -> int:
    """``noetl.server.requests.MAX_SIGNALS``, read when it is used: that module is where the
    request limits are published (and where a test lowers this one)."""
    from noetl.server import requests

    return requests.MAX_SIGNALS


class OutsideRequests(RequestChecks):
    async def cancel(self, data: bytes) -> dict[str, Any]:
        """Record a cancel request as an engine input; the engine decides what it stops."""
        try:
            req = loads(data)
            execution_id = req["execution_id"]
        except (ValueError, KeyError, TypeError):
            log.warning('cancel request ignored: it needs {"execution_id": ...}')
            return reply_error(RequestInvalidError("cancel needs execution_id"))
        if problem := execution_id_problem(execution_id):
            log.warning("cancel request ignored: %s", problem)
            return reply_error(RequestInvalidError(f"cancel: {problem}"))
        # the execution's own partition, whatever the count was when it started
        partition = await self._partition_of_recorded(execution_id)
        if partition is None:  # a cancel must not make a phantom execution appear
            log.warning("cancel request ignored: no execution %s", execution_id)
            return reply_error(NoSuchEntityError(f"no execution {execution_id}"))
        event = make_event(
            event_id=derive_id("cancel", execution_id),
            execution_id=execution_id,
            timestamp=utc_now(),
            source="server",
            name="execution.cancel.requested",
            entity_type="workflow",
            entity_id=execution_id,
            status="in_progress",
            payload={
                "reason": str(req.get("reason") or "cancelled by request"),
                "principal": _principal_name(req),
            },
        )
        subject = s.event_subject(partition, execution_id, event["name"])
        await store_all(self.bus, [(subject, dumps(event), event["event_id"])])
        return {"execution_id": execution_id, "cancel": "requested"}

    async def outside(self, subject: str, data: bytes, msg_id: str | None = None) -> dict[str, Any]:
        """Record a signal, pause or resume (SEMANTICS §17) as an engine input of its execution.
        The body is ``{execution_id, request_id, signal?, data?, reason?}``; ``request_id`` (or the
        message id) names this one request, so a repeated publish is recorded once."""
        what = subject.rsplit(".", 1)[-1]
        try:
            req = loads(data)
            execution_id = req["execution_id"]
        except (ValueError, KeyError, TypeError):
            return reply_error(RequestInvalidError(f'{what} needs {{"execution_id": ...}}'))
        if problem := execution_id_problem(execution_id):
            return reply_error(RequestInvalidError(f"{what}: {problem}"))
        request_id = str(req.get("request_id") or msg_id or derive_id(what, data.decode(errors="replace")))
        if problem := request_id_problem(request_id):
            return reply_error(RequestInvalidError(f"{what}: {problem}"))
        payload: dict[str, Any] = {"request_id": request_id, "principal": _principal_name(req)}
        if what == "signal":
            if problem := signal_name_problem(req.get("signal")):
                return reply_error(RequestInvalidError(problem))
            payload.update(signal=req["signal"], data=req.get("data"))
        elif req.get("reason") is not None:
            payload["reason"] = str(req["reason"])[:500]
        partition = await self._partition_of_recorded(execution_id)
        if partition is None:
            log.warning("%s ignored: no execution %s", what, execution_id)
            return reply_error(NoSuchEntityError(f"no execution {execution_id}"))
        if await self._finished(execution_id):
            return reply_error(
                ExecutionFinishedError(f"execution {execution_id} has finished: there is nothing to {what}")
            )
        if what == "signal" and await self._queued_signals(execution_id) >= (limit := _max_signals()):
            return reply_error(RequestInvalidError(
                f"execution {execution_id} has {limit} signals queued that no step has taken, the most "
                "one execution holds: its queue would grow without bound. Signals are taken by steps "
                "that await them (lifecycle.await); send this one when one has been taken"
            ))
        names: dict[str, EventName] = {"signal": vocab.SIGNAL_RECEIVED, "pause": vocab.PAUSE_REQUESTED}
        name = names.get(what, vocab.RESUME_REQUESTED)
        event = make_event(
            event_id=derive_id(what, execution_id, request_id),
            execution_id=execution_id,
            timestamp=utc_now(),
            source="server",
            name=name,
            entity_type="workflow",
            entity_id=execution_id,
            status="in_progress",
            payload=payload,
        )
        subject = s.event_subject(partition, execution_id, name)
        await store_all(self.bus, [(subject, dumps(event), event["event_id"])])
        return {"execution_id": execution_id, what: "recorded", "request_id": request_id}

    async def _queued_signals(self, execution_id: str) -> int:
        """Signals received and not yet taken by a waiting run: the queue the engine holds in
        memory, which is what must stay bounded; the count of signals an execution has consumed
        over its life is not (``signal.taken`` carries the running total of those)."""
        received = s.execution_event_filter(execution_id, vocab.SIGNAL_RECEIVED)
        count = len(await self.bus.read(s.EVENTS_STREAM, [received]))
        taken_filter = s.execution_event_filter(execution_id, vocab.SIGNAL_TAKEN)
        last = await self.bus.last(s.EVENTS_STREAM, taken_filter)
        if last is None:
            return count
        try:
            taken = int((loads(last.data).get("payload") or {}).get("taken") or 0)
        except (ValueError, TypeError, AttributeError):
            taken = 0
        return count - taken

    async def _finished(self, execution_id: str) -> bool:
        finished = s.execution_event_filter(execution_id, "workflow.finished")
        return await self.bus.last(s.EVENTS_STREAM, finished) is not None

    async def reject_unrecordable(self, data: bytes, msg_id: str | None, cause: BaseException) -> None:
        """A request that failed for no reason of NATS's (a bug, input nothing foresaw) ends in
        ``workflow.finished`` all the same when its sender gave an id, rather than vanishing."""
        known = self._known_id(data, msg_id)
        if known is None or request_id_problem(known):
            return
        execution_id = execution_id_for(known)
        err = RequestInvalidError(
            f"the server could not record this request ({type(cause).__name__}: {str(cause)[:200]}); "
            "check the request against docs/nats-contract.md and report the message if it is valid"
        )
        await self._reject(execution_id, s.partition_of(execution_id, self.partitions), err.to_dict(), {})
