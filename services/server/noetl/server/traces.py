"""The server's spans of one decision (``noetl.events.tracing`` has the whole tree).

Called only when tracing is on. A decision is a ``decide <event>`` span under the execution's
root; every command it schedules carries the decision's W3C ``traceparent``, so the worker's
``command`` span hangs under it; the decision that emits ``workflow.finished`` records the root
span itself, from the request (``playbook.execution.requested``) to the end.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, cast

from noetl.events import tracing
from noetl.events.envelope import Event, trace_of

# when each running execution was requested (the root span starts there, before the request span);
# a replica that took an execution over starts its root at workflow.started instead
_REQUESTED: OrderedDict[str, str] = OrderedDict()
_KEEP = 100_000


def trace_decision(state: Any, event: Event, decision: Any) -> None:
    eid = event["execution_id"]
    if event["name"] == "playbook.execution.requested" and event.get("timestamp"):
        _REQUESTED[eid] = str(event["timestamp"])
        while len(_REQUESTED) > _KEEP:
            _REQUESTED.popitem(last=False)
    trace = str(getattr(state, "trace_id", None) or trace_of(event))
    root = tracing.root_span(trace, eid)
    decide_id = tracing.span_int(trace, "decide", event["event_id"])
    step = event.get("entity_id") if event.get("entity_type") == "step" else None
    tracing.record(
        f"decide {event['name']}",
        trace,
        span_id=decide_id,
        parent=root,
        attributes={
            "execution_id": eid,
            "event_id": event["event_id"],
            "event": event["name"],
            "step": step or "",
            "events_out": len(decision.events),
            "commands_out": len(decision.commands),
        },
    )
    parent = tracing.traceparent(trace, decide_id)
    for cmd in decision.commands:
        cast(dict[str, Any], cmd)["traceparent"] = parent
    for ev in decision.events:
        if ev["name"] == "workflow.finished":
            playbook = getattr(state, "playbook", None)
            path = getattr(getattr(playbook, "metadata", None), "path", None) or eid
            status = str((ev.get("payload") or {}).get("status", ""))
            tracing.record(
                f"execution {path}",
                trace,
                span_id=root,
                start=_REQUESTED.pop(eid, None) or getattr(state, "started_at", None) or ev.get("timestamp"),
                end=ev.get("timestamp"),
                attributes={"execution_id": eid, "status": status, "path": str(path)},
            )
