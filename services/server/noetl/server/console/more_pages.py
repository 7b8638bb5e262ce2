"""Console pages of issue 31: rerun from a step, a loop's iteration table, schedules.

Like the other pages they are rendered from the reads the API answers from (the event log, the
schedule store) and post back here, never to ``/api/*``, with the same same-origin check.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from noetl.client.iterations import STATUSES as ITERATION_STATUSES
from noetl.client.iterations import iteration_page, loop_runs_of
from noetl.events.bus import read_execution_events
from noetl.server.api.context import ctx_of, guard_execution, principal_of
from noetl.server.api.queries import list_executions, valid_execution_id
from noetl.server.console.fold import duration_ms, fold
from noetl.server.console.render import page
from noetl.server.console.signin import _forbidden, form_data, form_payload, same_origin
from noetl.server.rerun import Rerun, prepare_rerun, start_rerun
from noetl.store.audit import record_action
from noetl.store.principals import namespace_of

ITERATIONS_PER_PAGE = 50
NEXT_FIRES = 3  # upcoming fire times shown per schedule
LAST_RUNS = 5  # latest executions shown per schedule


# --- rerun ---------------------------------------------------------------------------------


async def rerun_page(
    request: Request, *, error: str | None = None, form: dict[str, str] | None = None, status_code: int = 200
) -> Response:
    """What a rerun from ``?from=STEP`` (default: the failed steps) keeps and cannot keep, said
    before it runs, with the payload to run it with."""
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return page(request, "missing.html", 400, what=f"execution {eid}")
    if (refused := await _guard_rerun(request, eid)) is not None:
        return refused
    ctx = ctx_of(request)
    form = form or {}
    from_step = (form.get("from") or request.query_params.get("from") or "").strip() or None
    got = await prepare_rerun(ctx.bus, ctx.catalog, eid, from_step=from_step)
    if isinstance(got, dict) and got["error"]["kind"] == "not_found":
        return page(request, "missing.html", 404, what=f"execution {eid}")
    original = (got.request.get("payload") if isinstance(got, Rerun) else None) or {}
    return page(
        request,
        "rerun.html",
        status_code,
        execution_id=eid,
        from_step=from_step,
        plan=got.to_dict() if isinstance(got, Rerun) else None,
        refused=got["error"]["message"] if isinstance(got, dict) else None,
        error=error,
        payload=form.get("payload") or json.dumps(original, indent=2),
        request_id=form.get("request_id") or uuid.uuid4().hex,
        nav="executions",
    )


async def _guard_rerun(request: Request, eid: str) -> Response | None:
    """The page that refuses a rerun of ``eid`` to the signed-in principal, or None: one that may
    not read the execution finds no such execution, one that may only read it is told so."""
    refused = await guard_execution(request, eid, "write")
    if refused is None:
        return None
    if refused.status_code == 404:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    principal = principal_of(request)
    return page(
        request,
        "rerun.html",
        403,
        execution_id=eid,
        from_step=None,
        plan=None,
        refused=f"principal {principal.name!r} ({principal.role}) may not rerun execution {eid}",
        error=None,
        payload="",
        request_id="",
        nav="executions",
    )


async def rerun_start(request: Request) -> Response:
    if not same_origin(request):
        return _forbidden()
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return page(request, "missing.html", 400, what=f"execution {eid}")
    if (refused := await _guard_rerun(request, eid)) is not None:
        return refused
    form = await form_data(request)
    payload = form_payload(form)
    if isinstance(payload, str):
        return await rerun_page(request, error=payload, form=form, status_code=400)
    ctx = ctx_of(request)
    got = await prepare_rerun(
        ctx.bus,
        ctx.catalog,
        eid,
        from_step=(form.get("from") or "").strip() or None,
        payload=payload,
        request_id=form.get("request_id") or None,  # a double click starts one rerun
    )
    if isinstance(got, dict):
        return await rerun_page(request, error=got["error"]["message"], form=form, status_code=409)
    principal = principal_of(request)
    reply = await start_rerun(ctx.requests, got, principal)
    err = reply.get("error")
    await record_action(
        ctx.bus, action="rerun", principal=principal.name, target=eid,
        outcome=err.get("kind", "refused") if err else "done", execution_id=reply.get("execution_id"),
    )
    if reply.get("error") and not reply.get("execution_id"):
        err = reply["error"]
        return await rerun_page(
            request, error=f"{err.get('kind')}: {err.get('message')}", form=form, status_code=400
        )
    return RedirectResponse(f"/ui/executions/{reply['execution_id']}", status_code=303)


# --- iterations ----------------------------------------------------------------------------


async def iterations_page(request: Request) -> Response:
    """A loop step run's iterations, ``ITERATIONS_PER_PAGE`` at a time, filtered by status."""
    eid, rid = request.path_params["execution_id"], request.path_params["run_id"]
    if not valid_execution_id(eid):
        return page(request, "missing.html", 400, what=f"execution {eid}")
    if await guard_execution(request, eid, "read") is not None:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    view = fold(eid, await read_execution_events(ctx_of(request).bus, eid))  # the table and the page
    run = loop_runs_of(view).get(rid)
    if run is None:
        return page(request, "missing.html", 404, what=f"loop run {rid} of execution {eid}")
    q = request.query_params
    status = q.get("status") if q.get("status") in ITERATION_STATUSES else None
    try:
        offset = max(int(q.get("offset") or 0), 0)
    except ValueError:
        offset = 0
    out = iteration_page(run, status=status, offset=offset, limit=ITERATIONS_PER_PAGE)
    base = {"status": status} if status else {}
    older = (
        "?" + urlencode({**base, "offset": out["next_offset"]}) if out["next_offset"] is not None else None
    )
    newer = "?" + urlencode({**base, "offset": max(offset - ITERATIONS_PER_PAGE, 0)}) if offset > 0 else None
    return page(
        request,
        "iterations.html",
        bars=iteration_bars(run, out["iterations"]),
        view=view,
        run=out,
        statuses=ITERATION_STATUSES,
        status=status,
        next_page=older,
        previous_page=newer,
        nav="executions",
    )


def iteration_bars(
    run: dict[str, Any], rows: list[dict[str, Any]], *, width: float = 900.0, label_w: float = 60.0
) -> dict[str, Any] | None:
    """The page's iterations as bars on the loop's own time axis (its first start to its last
    end), so stragglers and retries stand out; None when nothing has a start yet."""
    starts = [r["started"] for r in run["rows"].values() if r.get("started")]
    ends = [r["ended"] or r["started"] for r in run["rows"].values() if r.get("started")]
    if not starts or not rows:
        return None
    t0, t1 = min(starts), max(ends)
    span = max(duration_ms(t0, t1) or 0.0, 1.0)
    scale = (width - label_w - 12) / span
    row_h, top = 16.0, 18.0
    bars = []
    for i, r in enumerate(rows):
        start = duration_ms(t0, r.get("started")) or 0.0
        stop = duration_ms(t0, r.get("ended") or t1) or start
        bars.append(
            {
                "row": r,
                "x": label_w + start * scale,
                "w": max((stop - start) * scale, 3.0),
                "y": top + i * row_h,
            }
        )
    ticks = [(label_w + f * span * scale, f * span) for f in (0, 0.5, 1)]
    return {"bars": bars, "width": width, "height": top + len(bars) * row_h + 4, "ticks": ticks}


# --- schedules -----------------------------------------------------------------------------


async def schedules_page(request: Request, *, refused: str | None = None, status_code: int = 200) -> Response:
    from noetl.store.schedules import ScheduleStore, next_fire

    bus = ctx_of(request).bus
    store = await ScheduleStore.open(bus)
    principal = principal_of(request)

    def visible(namespace: str) -> bool:
        return principal.may("read", namespace)

    # schedules, and runs, of namespaces the principal may not read are not shown
    schedules = sorted(
        (sch for sch in await store.list() if visible(namespace_of(sch.get("path")))),
        key=lambda sch: sch["name"],
    )
    runs: dict[str, list[dict[str, Any]]] = {}
    if schedules:
        now = datetime.now(UTC).isoformat()
        for e in (await list_executions(bus, limit=1000, visible=visible))["executions"]:
            if e.get("schedule") and len(runs.setdefault(e["schedule"], [])) < LAST_RUNS:
                runs[e["schedule"]].append(
                    {**e, "duration_ms": duration_ms(e.get("requested_at"), e.get("finished_at") or now)}
                )
    for sch in schedules:
        fires: list[str] = []
        if not sch.get("paused"):
            at = None
            for _ in range(NEXT_FIRES):
                at = next_fire(sch, at)
                fires.append(at.isoformat())
        sch["next_fires"] = fires
        sch["runs"] = runs.get(sch["name"], [])
    return page(request, "schedules.html", status_code, schedules=schedules, refused=refused, nav="schedules")


async def schedule_action(request: Request) -> Response:
    from noetl.store.schedules import ScheduleStore

    if not same_origin(request):
        return _forbidden()
    name, action = request.path_params["name"], request.path_params["action"]
    bus = ctx_of(request).bus
    store = await ScheduleStore.open(bus)
    principal = principal_of(request)  # the store refuses a namespace the principal may not write
    if action in ("pause", "resume"):
        out = await store.set_paused(name, action == "pause", principal)
    elif action == "delete":
        out = await store.delete(name, principal)
    else:
        return page(request, "missing.html", 404, what=f"schedule action {action}")
    err = out.get("error")
    await record_action(
        bus, action=f"schedule.{action}", principal=principal.name, target=name,
        outcome=err.get("kind", "refused") if err else "done",
    )
    if err:
        code = 403 if err.get("kind") == "forbidden" else 409
        return await schedules_page(request, refused=str(err.get("message")), status_code=code)
    return RedirectResponse("/ui/schedules", status_code=303)


routes = [
    Route("/ui/executions/{execution_id}/rerun", rerun_page, methods=["GET"], include_in_schema=False),
    Route(
        "/ui/executions/{execution_id}/rerun/start", rerun_start, methods=["POST"], include_in_schema=False
    ),
    Route(
        "/ui/executions/{execution_id}/runs/{run_id}/iterations",
        iterations_page,
        methods=["GET"],
        include_in_schema=False,
    ),
    Route("/ui/schedules", schedules_page, methods=["GET"], include_in_schema=False),
    Route("/ui/schedules/{name}/{action}", schedule_action, methods=["POST"], include_in_schema=False),
]
