"""Loop iterations and task runs of an execution, one row each, rendered from the read-side
projection of its event log (``noetl.client.projection``, issue 31).

A loop step of 60 elements is 60 pipeline runs; a person looking for the one that failed needs
them by index, with status, attempts, duration and error, filtered and paged, not the first 50
task runs. The HTTP API (``/api/executions/{id}/iterations``) and the console's iteration table
both answer from here, and the console's graph counts the same iterations, so none of them can
disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from noetl.client.execution_view import STOP_KINDS, ExecutionView
from noetl.client.projection import fold
from noetl.dsl.errors import brief

__all__ = ["STATUSES", "STOP_KINDS", "iteration_page", "loop_runs", "task_runs"]

STATUSES = ("done", "failed", "stopped", "running")


def loop_runs(events: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per loop step run: ``{step, step_run_id, total, iterations: {index: row}}``; a row is
    ``{index, status, attempts, tasks, started, ended, duration_ms, error, worker}``."""
    return loop_runs_of(fold("", events))


def loop_runs_of(view: ExecutionView) -> dict[str, dict[str, Any]]:
    """``loop_runs`` of a settled view: only loops ``loop.started`` announced have rows to page."""
    runs: dict[str, dict[str, Any]] = {}
    for run in view.runs:
        loop = run.announced_loop
        if loop is None:
            continue
        rows = {i: _row(asdict(row)) for i, row in loop.rows.items()}
        runs[run.run_id] = {"step": run.step, "step_run_id": run.run_id, "total": loop.total, "rows": rows}
    return runs


def _row(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("index", "status", "attempts", "tasks", "started", "ended", "duration_ms", "error", "worker")
    out = {k: row[k] for k in keys}
    out["error"] = brief(row["error"])
    return out


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
    view = fold("", events)
    step_of = {r.run_id: r.step for r in view.runs}
    out = [
        {
            "step": step_of.get(t.step_run_id or ""),
            "step_run_id": t.step_run_id,
            "task": t.label,
            "task_run_id": t.task_run_id,
            "index": t.index,
            "attempt": t.attempt,
            "kind": t.kind,
            "status": t.status,
            "started": t.started,
            "ended": t.ended,
            "duration_ms": t.duration_ms,
            "error": brief(t.error),
        }
        for t in view.tasks.values()
    ]
    return [r for r in out if r["step"] == step] if step else out
