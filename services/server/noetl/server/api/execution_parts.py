"""`GET /api/executions/{id}/iterations`, `/tasks` and `/lineage`: an execution's loop iterations
and task runs, page by page, and the executions it came from or started (docs/api.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from noetl.dsl.errors import NoSuchEntityError, RequestInvalidError
from noetl.server.api.context import (
    ctx_of,
    error,
    guard_execution,
    principal_of,
)
from noetl.server.api.follow import follow_events
from noetl.server.api.queries import (
    valid_execution_id,
)


async def get_execution_iterations(request: Request) -> Response:
    """
    ---
    summary: One page of a loop step's iterations
    description: Index, status (done, failed, stopped, running), attempts, task runs, duration
      and error of each iteration of a loop step run, in index order, with the counts per status.
      Without `run` the step's last run is shown.
    parameters:
      - {name: step, in: query, required: true, schema: {type: string}}
      - {name: run, in: query, description: a step_run_id of the step, schema: {type: string}}
      - {name: status, in: query, schema: {type: string, enum: [done, failed, stopped, running]}}
      - {name: offset, in: query, schema: {type: integer, default: 0}}
      - {name: limit, in: query, schema: {type: integer, default: 50, maximum: 1000}}
    responses:
      200: {description: "{step, step_run_id, total, counts, matching, offset, limit, next_offset,
        iterations: [{index, status, attempts, tasks, started, ended, duration_ms, error, worker}]}"}
      400: {description: bad query}
      404: {description: no such execution, or no loop run of that step}
    """
    from noetl.client.iterations import STATUSES, iteration_page, loop_runs

    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    q = request.query_params
    step, status = q.get("step") or "", q.get("status") or None
    if not step:
        return error(400, RequestInvalidError, "give ?step=NAME: the loop step whose iterations to list")
    if status is not None and status not in STATUSES:
        return error(400, RequestInvalidError, f"status is one of {', '.join(STATUSES)}")
    try:
        offset, limit = int(q.get("offset", "0")), int(q.get("limit", "50"))
    except ValueError:
        return error(400, RequestInvalidError, "offset and limit must be integers")
    events = [ev async for ev in follow_events(ctx_of(request).bus, eid, follow=False) if ev is not None]
    if not events:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    runs = [r for r in loop_runs(events).values() if r["step"] == step]
    if q.get("run"):
        runs = [r for r in runs if r["step_run_id"] == q["run"]]
    if not runs:
        return error(
            404, NoSuchEntityError, f"step {step!r} has no loop run in execution {eid}: check the step's name"
        )
    out = iteration_page(runs[-1], status=status, offset=offset, limit=limit)
    return JSONResponse({"execution_id": eid, **out})


async def get_execution_tasks(request: Request) -> Response:
    """
    ---
    summary: One page of an execution's task runs
    description: Every task run in log order (a step's details in the console stop at 50), with
      step, iteration index, attempt, kind, status, duration and error; `status` keeps the task
      runs of one outcome status (ok, error, running, ...).
    parameters:
      - {name: step, in: query, schema: {type: string}}
      - {name: status, in: query, schema: {type: string}}
      - {name: offset, in: query, schema: {type: integer, default: 0}}
      - {name: limit, in: query, schema: {type: integer, default: 100, maximum: 1000}}
    responses:
      200: {description: "{execution_id, total, offset, limit, next_offset, tasks: [...]}"}
      404: {description: no event of this execution}
    """
    from noetl.client.iterations import task_runs

    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    q = request.query_params
    try:
        offset, limit = max(int(q.get("offset", "0")), 0), max(1, min(int(q.get("limit", "100")), 1000))
    except ValueError:
        return error(400, RequestInvalidError, "offset and limit must be integers")
    events = [ev async for ev in follow_events(ctx_of(request).bus, eid, follow=False) if ev is not None]
    if not events:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    rows = task_runs(events, q.get("step") or None)
    if q.get("status"):
        rows = [r for r in rows if r["status"] == q["status"]]
    page = rows[offset : offset + limit]
    nxt = offset + limit if offset + limit < len(rows) else None
    return JSONResponse(
        {
            "execution_id": eid,
            "total": len(rows),
            "offset": offset,
            "limit": limit,
            "next_offset": nxt,
            "tasks": page,
        }
    )


async def get_execution_lineage(request: Request) -> Response:
    """
    ---
    summary: Parent, children, and reruns of an execution
    description: The parent that started it (kind playbook), the executions it started, the
      execution it was forked from by a rerun (with what was kept and what not) and its reruns.
    responses:
      200: {description: "{execution_id, parent_execution_id, forked_from, children, reruns}"}
      404: {description: no event of this execution}
    """
    from noetl.server.lineage import lineage

    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    bus = ctx_of(request).bus
    events = [ev async for ev in follow_events(bus, eid, follow=False) if ev is not None]
    if not events:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    principal = principal_of(request)  # children and reruns of namespaces it may not read: not listed
    return JSONResponse(await lineage(bus, eid, events, visible=lambda ns: principal.may("read", ns)))


def _id_or_error(request: Request) -> tuple[str, Response | None]:
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return eid, error(400, RequestInvalidError, "execution ids are letters, digits, '-' and '_'")
    return eid, None
