"""Loop iterations of an execution, one row each, read from its event log (issue 31).

A loop step of 60 elements is 60 pipeline runs; a person looking for the one that failed needs
them by index, with status, attempts, duration and error, filtered and paged, not the first 50
task runs. The HTTP API (``/api/executions/{id}/iterations``) and the console's iteration table
both answer from here, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from noetl.dsl.errors import brief

# errors that end an iteration without it having failed on its own (a cancel or an abort
# stopped it): shown as ``stopped``, not as a failure to look into
STOP_KINDS = frozenset({"cancelled", "aborted", "step_timeout", "execution_timeout"})
STATUSES = ("done", "failed", "stopped", "running")


def _ms(start: Any, end: Any) -> float | None:
    try:
        a = datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        b = datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return None
    return max((b - a).total_seconds() * 1000.0, 0.0)


def loop_runs(events: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per loop step run: ``{step, step_run_id, total, iterations: {index: row}}``; a row is
    ``{index, status, attempts, tasks, started, ended, duration_ms, error, worker}``."""
    runs: dict[str, dict[str, Any]] = {}
    finished_at = None
    for ev in events:
        name = ev.get("name")
        payload = (_d if isinstance(_d := ev.get("payload"), dict) else {})
        rid = str(ev.get("step_run_id") or "")
        if name == "loop.started":
            runs[rid] = {
                "step": ev.get("entity_id"),
                "step_run_id": rid,
                "total": payload.get("total"),
                "rows": {},
            }
            continue
        if name == "workflow.finished":
            finished_at = ev.get("timestamp")
        run = runs.get(rid)
        if run is None:
            continue
        if name == "task.started" and isinstance(payload.get("index"), int):
            i = payload["index"]
            row = run["rows"].setdefault(i, _row(i, ev.get("timestamp")))
            row["tasks"] += 1
            attempt = payload.get("attempt")
            if isinstance(attempt, int):
                row["attempts"] = max(row["attempts"], attempt)
        elif name in ("loop.iteration.done", "loop.iteration.failed") and isinstance(
            payload.get("index"), int
        ):
            i = payload["index"]
            row = run["rows"].setdefault(i, _row(i, ev.get("timestamp")))
            row["ended"] = ev.get("timestamp")
            row["worker"] = payload.get("worker") or row["worker"]
            error = (_d if isinstance(_d := payload.get("error"), dict) else None)
            if name == "loop.iteration.done":
                row["status"] = "done"
            else:
                row["status"] = "stopped" if (error or {}).get("kind") in STOP_KINDS else "failed"
                row["error"] = brief(error)
            row["duration_ms"] = _ms(row["started"], row["ended"])
    for run in runs.values():
        for row in run["rows"].values():
            if row["status"] == "running" and finished_at is not None:
                row["status"], row["ended"] = "stopped", finished_at
    return runs


def _row(index: int, started: Any) -> dict[str, Any]:
    return {
        "index": index,
        "status": "running",
        "attempts": 0,
        "tasks": 0,
        "started": started,
        "ended": None,
        "duration_ms": None,
        "error": None,
        "worker": None,
    }


def iteration_page(
    run: dict[str, Any], *, status: str | None = None, offset: int = 0, limit: int = 50
) -> dict[str, Any]:
    """One page of a loop run's iterations in index order, optionally of one status, with the
    counts per status (what the filter offers) and ``next_offset`` (None on the last page)."""
    rows = [run["rows"][i] for i in sorted(run["rows"])]
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in STATUSES}
    total = t if isinstance(t := run.get("total"), int) else len(rows)
    counts["pending"] = max(total - len(rows), 0)
    if status:
        rows = [r for r in rows if r["status"] == status]
    offset, limit = max(int(offset), 0), max(1, min(int(limit), 1000))
    page = rows[offset : offset + limit]
    return {
        "step": run.get("step"),
        "step_run_id": run.get("step_run_id"),
        "total": total,
        "counts": counts,
        "status": status,
        "matching": len(rows),
        "offset": offset,
        "limit": limit,
        "next_offset": offset + limit if offset + limit < len(rows) else None,
        "iterations": page,
    }


def task_runs(events: list[dict[str, Any]], step: str | None = None) -> list[dict[str, Any]]:
    """Every task run in log order, one row each (``{step, step_run_id, task, task_run_id,
    index, attempt, kind, status, started, ended, duration_ms, error}``): what ``GET
    /api/executions/{id}/tasks`` pages through, where a step's details stop at 50."""
    step_of: dict[str, str] = {}
    rows: dict[str, dict[str, Any]] = {}
    for ev in events:
        name = ev.get("name")
        payload = (_d if isinstance(_d := ev.get("payload"), dict) else {})
        rid = str(ev.get("step_run_id") or "")
        if name in ("step.scheduled", "loop.started", "step.waiting"):
            step_of.setdefault(rid, str(ev.get("entity_id")))
        elif name == "task.started":
            tid = str(ev.get("task_run_id") or "")
            rows[tid] = {
                "step": step_of.get(rid),
                "step_run_id": rid,
                "task": payload.get("task") or ev.get("entity_id"),
                "task_run_id": tid,
                "index": payload.get("index") if isinstance(payload.get("index"), int) else None,
                "attempt": payload.get("attempt"),
                "kind": payload.get("kind"),
                "status": "running",
                "started": ev.get("timestamp"),
                "ended": None,
                "duration_ms": None,
                "error": None,
            }
        elif name == "task.done":
            row = rows.get(str(ev.get("task_run_id") or ""))
            if row is None:
                continue
            outcome = (_d if isinstance(_d := payload.get("outcome"), dict) else {})
            meta = (_d if isinstance(_d := outcome.get("meta"), dict) else {})
            row["status"] = str(outcome.get("status") or "done")
            row["ended"] = ev.get("timestamp")
            row["duration_ms"] = (
                meta.get("duration_ms") if isinstance(meta.get("duration_ms"), int | float) else None
            )
            row["error"] = brief(_d if isinstance(_d := outcome.get("error"), dict) else None)
    out = list(rows.values())
    return [r for r in out if r["step"] == step] if step else out
