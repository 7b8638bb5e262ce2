"""The ``--json`` view of an execution (SEMANTICS §15), built from its events alone: the same
for the CLI, the HTTP API and every client that follows an execution."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from noetl.events.vocabulary import EventName

_STEP_STATUS = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}


def execution_output(execution_id: str, events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    runs: dict[str, dict[str, Any]] = {}
    steps: dict[str, list[dict[str, Any]]] = {}
    finished: dict[str, Any] = {}
    for ev in events:
        name: EventName | None = ev.get("name")  # so each name compared below is checked
        rid = ev.get("step_run_id")
        run: dict[str, Any] | None
        if name in ("step.scheduled", "step.skipped") and rid and rid not in runs:
            run = {"status": "skipped" if name == "step.skipped" else "running", "result": None}
            runs[rid] = run
            steps.setdefault(ev["entity_id"], []).append(run)
        elif name in _STEP_STATUS and rid:
            run = runs.get(rid)
            if run is None:  # a step failed before it was scheduled (admission template error)
                run = runs[rid] = {"status": "running", "result": None}
                steps.setdefault(ev["entity_id"], []).append(run)
            if run["status"] == "running":
                run["status"] = _STEP_STATUS[name]
                run["result"] = (ev.get("payload") or {}).get("result")
                if name == "step.failed":
                    run["error"] = (ev.get("payload") or {}).get("error")
        elif name == "workflow.finished":
            finished = ev.get("payload") or {}
    return {
        "execution_id": execution_id,
        "status": finished.get("status", "running"),
        "result": finished.get("result"),
        "ctx": finished.get("ctx") or {},
        "error": finished.get("error"),
        "steps": steps,
        "events": events,
    }


def waiting_for(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a running execution waits for (SEMANTICS §17): the signals its step runs await, and
    whether it is paused. From the events alone, as every view here."""
    waiting: dict[str, dict[str, Any]] = {}
    paused = False
    for ev in events:
        name: EventName | None = ev.get("name")  # so each name compared below is checked
        rid = ev.get("step_run_id")
        if name == "step.waiting" and rid:
            p = raw if isinstance(raw := ev.get("payload"), dict) else {}
            waiting[rid] = {
                "step": ev.get("entity_id"),
                "step_run_id": rid,
                "signal": p.get("signal"),
                "since": ev.get("timestamp"),
                "timeout_s": p.get("timeout_s"),
            }
        elif name in ("step.scheduled", "step.failed") and rid:
            waiting.pop(rid, None)
        elif name in ("execution.paused", "execution.resumed"):
            paused = name == "execution.paused"
        elif name == "workflow.finished":
            return {"signals": [], "paused": False}
    return {"signals": list(waiting.values()), "paused": paused}
