"""The ``--json`` view of an execution (SEMANTICS §15), rendered from the read-side projection
(``noetl.client.projection``) of its events: the same for the CLI, the HTTP API and every client
that follows an execution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from noetl.client import projection
from noetl.client.execution_view import ExecutionView


def execution_output(execution_id: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out = output_of(projection.folded(execution_id, events).view)
    out["events"] = events
    return out


def output_of(view: ExecutionView) -> dict[str, Any]:
    """The SEMANTICS §15 fields of an unsettled view (``projection.folded``): a run the execution
    left running when it finished still says ``running`` here, as the log left it, and a run
    only announced as waiting for its signal is not listed until it is scheduled or ends."""
    steps: dict[str, list[dict[str, Any]]] = {}
    for run in sorted((r for r in view.runs if r.listed is not None), key=lambda r: r.listed or 0):
        entry: dict[str, Any] = {"status": "running" if run.status == "waiting" else run.status}
        entry["result"] = run.result
        if run.status == "failed":
            entry["error"] = run.error
        steps.setdefault(run.step, []).append(entry)
    return {
        "execution_id": view.execution_id,
        "status": view.status,
        "result": view.result,
        "ctx": view.ctx or {},
        "error": view.error,
        "steps": steps,
    }


def waiting_for(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a running execution waits for (SEMANTICS §17): the signals its step runs await, and
    whether it is paused. Rendered from the read-side projection (``noetl.client.projection``)."""
    return projection.waiting_for(events)
