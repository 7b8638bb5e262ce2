"""The console's pages and the few endpoints their script calls, all under ``/ui``.

Pages are rendered on the server from the same reads the API answers from (the event log, the
catalog, the runtime bucket), so the console cannot drift from the API and needs no front-end
build. The only script, ``static/console.js``, follows an execution over server-sent events and
swaps in fragments the server renders; every page works without it, just without live updates.

Forms post back here rather than to ``/api/*``: the API takes a bearer header only, and these
handlers check that a post comes from a page of this server (a cross-site form cannot cancel or
start an execution, even where the console needs no token).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from noetl.dsl.errors import ForbiddenError, PlaybookInvalidError, reply_error
from noetl.dsl.validate import load_playbook
from noetl.events.bus import read_execution_events
from noetl.events.envelope import Event
from noetl.events.runtime import list_runtime
from noetl.server.api.context import ctx_of, guard_execution, principal_of
from noetl.server.api.follow import follow_events
from noetl.server.api.queries import list_executions, signal_refusal, stall_of, valid_execution_id
from noetl.server.console.actions import _BY, _REFUSED, _WAIT_ACTIONS, ACTIONS, Action, actions_for
from noetl.server.console.catalog_pages import catalog_page, playbook_page, start_execution
from noetl.server.console.fold import ExecutionView, duration_ms, fold
from noetl.server.console.graph import Graph, layout
from noetl.server.console.render import STATIC, page, render
from noetl.server.console.signin import _forbidden, form_data, login, login_post, logout, same_origin
from noetl.server.lineage import children_of, reruns_of
from noetl.store.audit import record_action

STATUSES = ("running", "success", "failed", "cancelled")
PAGE_SIZE = 50
KEEPALIVE_SECONDS = 15.0
_GRAPHS: dict[str, Graph | None] = {}  # by playbook digest: a digest's text never changes
_MAX_GRAPHS = 256


# --- login ---------------------------------------------------------------------------------


# --- executions ----------------------------------------------------------------------------


async def home(request: Request) -> Response:
    return RedirectResponse("/ui/executions", status_code=303)


async def executions_page(request: Request) -> Response:
    q = request.query_params
    status = q.get("status") if q.get("status") in STATUSES else None
    path = (q.get("path") or "").strip() or None
    try:
        before = int(q["before"]) if q.get("before") else None
    except ValueError:
        before = None
    principal = principal_of(request)
    out = await list_executions(
        ctx_of(request).bus, status=status, path=path, limit=PAGE_SIZE, before=before,
        visible=lambda namespace: principal.may("read", namespace),
    )
    now = datetime.now(UTC).isoformat()
    rows = [
        {**e, "duration_ms": duration_ms(e.get("requested_at"), e.get("finished_at") or now)}
        for e in out["executions"]
    ]
    rows = group_children(rows)
    filters = {k: v for k, v in (("status", status), ("path", path)) if v}
    older = "?" + urlencode({**filters, "before": out["next_cursor"]}) if out["next_cursor"] else None
    newest = "?" + urlencode(filters) if before is not None else None
    return page(
        request,
        "executions.html",
        rows=rows,
        statuses=STATUSES,
        status=status,
        path=path,
        older=older,
        newest=newest,
        nav="executions",
    )


def group_children(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each child execution right under its parent when the parent is on the page (``child``
    set, so the list can indent it); a child whose parent is not is labelled where it stands."""
    on_page = {r["execution_id"] for r in rows}
    kids: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        parent = r.get("parent_execution_id")
        if parent and parent in on_page and parent != r["execution_id"]:
            kids.setdefault(parent, []).append(r)
    placed = {k["execution_id"] for v in kids.values() for k in v}
    out: list[dict[str, Any]] = []

    def add(r: dict[str, Any], depth: int) -> None:
        out.append({**r, "depth": depth, "child": bool(r.get("parent_execution_id"))})
        for k in reversed(kids.get(r["execution_id"], [])):  # oldest child first
            if depth < 8:
                add(k, depth + 1)

    for r in rows:
        if r["execution_id"] not in placed:
            add(r, 0)
    return out


async def _graph_for(ctx: Any, events: Sequence[Mapping[str, Any]]) -> Graph | None:
    requested = next((e for e in events if e.get("name") == "playbook.execution.requested"), None)
    if requested is None:  # a request refused before it was recorded has no playbook
        return None
    digest = str((requested.get("payload") or {}).get("digest") or "")
    if digest and digest in _GRAPHS:
        return _GRAPHS[digest]
    try:
        ev = await ctx.catalog.with_playbook_text(requested)
        text = (ev.get("payload") or {}).get("playbook")
        graph = layout(load_playbook(text, "<execution>")) if isinstance(text, str) else None
    except (LookupError, PlaybookInvalidError):
        graph = None
    if digest:
        if len(_GRAPHS) >= _MAX_GRAPHS:
            _GRAPHS.pop(next(iter(_GRAPHS)))
        _GRAPHS[digest] = graph
    return graph


def _fragments(view: ExecutionView) -> dict[str, str]:
    common = {"view": view, "actions": actions_for(view), "request_id": uuid.uuid4().hex}
    return {
        "summary": render("_summary.html", **common),
        "timeline": render("_timeline.html", **common),
        "outcome": render("_outcome.html", **common),
    }


def _node_states(view: ExecutionView) -> dict[str, dict[str, str]]:
    out = {}
    for step in dict.fromkeys(r.step for r in view.runs):
        status, detail = view.step_state(step)
        out[step] = {"status": status, "detail": detail}
    for step in (view.forked or {}).get("kept") or []:  # a rerun: done in the original, not run again
        if isinstance(step, str) and step not in out:
            out[step] = {"status": "kept", "detail": "kept from the original"}
    return out


async def _read_view(request: Request) -> tuple[ExecutionView, list[Event]] | Response:
    """The execution's fold and events, or the page that says there is no such execution."""
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return page(request, "missing.html", 400, what=f"execution {eid}")
    if await guard_execution(request, eid, "read") is not None:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    events = await read_execution_events(ctx_of(request).bus, eid)
    if not events:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    view = fold(eid, events)
    bus = ctx_of(request).bus
    view.stalled = await stall_of(bus, events, waiting=bool(view.waiting), paused=view.paused)
    principal = principal_of(request)  # children and reruns it may not read are not shown

    def visible(namespace: str) -> bool:
        return principal.may("read", namespace)

    if any(t.kind == "playbook" for r in view.runs for t in r.tasks):  # it may have started children
        view.children = await children_of(bus, eid, visible)
    if view.finished_at is not None:  # reruns fork finished executions only
        view.reruns = await reruns_of(bus, eid, visible)
    return view, events


async def execution_page(
    request: Request,
    *,
    refused: str | None = None,
    form: dict[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    """The page; after a refused action, with why (``refused``) and what was typed (``form``)."""
    got = await _read_view(request)
    if isinstance(got, Response):
        return got
    view, events = got
    graph = await _graph_for(ctx_of(request), events)
    return page(
        request,
        "execution.html",
        status_code,
        view=view,
        graph=graph,
        states=_node_states(view),
        actions=actions_for(view),
        last_event_id=events[-1].get("event_id") or "",
        refused=refused,
        form=form or {},
        request_id=uuid.uuid4().hex,
        nav="executions",
    )


async def execution_state(request: Request) -> Response:
    """What the page's script repaints after an event: node states, fired arcs, three fragments."""
    got = await _read_view(request)
    if isinstance(got, Response):
        return JSONResponse({"error": "not found"}, status_code=got.status_code)
    view, _events = got
    return JSONResponse(
        {
            "status": view.status,
            "finished": view.finished,
            "nodes": _node_states(view),
            "arcs": [f"{step}#{k}" for (step, k) in view.arcs],
            "html": _fragments(view),
        },
        headers={"Cache-Control": "no-store"},
    )


async def execution_stream(request: Request) -> Response:
    """The execution's events as SSE, names only: the page just needs to know when to repaint.
    ``?after=`` is the last event the page was rendered with (an EventSource cannot send
    ``Last-Event-ID`` on its first request)."""
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return Response(status_code=400)
    if (refused := await guard_execution(request, eid, "read")) is not None:
        return Response(status_code=refused.status_code)
    ctx = ctx_of(request)
    after = request.headers.get("last-event-id") or request.query_params.get("after") or None

    async def frames() -> AsyncIterator[str]:
        yield ": noetl console\n\n"
        async for ev in follow_events(
            ctx.bus, eid, after_event_id=after, stop=ctx.closing, idle=KEEPALIVE_SECONDS
        ):
            if ev is None:
                yield ": keep-alive\n\n"
                continue
            data = json.dumps({"name": ev.get("name"), "step": ev.get("entity_id")})
            yield f"id: {ev.get('event_id', '')}\ndata: {data}\n\n"

    return StreamingResponse(
        frames(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


async def _audited(
    request: Request, name: str, eid: str, form: dict[str, str], out: dict[str, Any] | None
) -> None:
    """A console action leaves the record the API's leaves (``noetl.audit.actions``): the trail
    must name who paused or answered an approval whichever door they came through. An approve or
    reject is the signal it sends, recorded as the API records a signal."""
    signal = name in _WAIT_ACTIONS
    err = {"kind": "not_found"} if out is None else out.get("error")
    await record_action(
        ctx_of(request).bus,
        action="signal" if signal else name,
        principal=principal_of(request).name,
        target=f"{eid}/{(form.get('signal') or '').strip()}" if signal else eid,
        outcome=err.get("kind", "refused") if err else "done",
        via="console",
        **({"answer": name} if name in ("approve", "reject") else {}),
    )


async def execution_action(request: Request) -> Response:
    if not same_origin(request):
        return _forbidden()
    eid, name = request.path_params["execution_id"], request.path_params["action"]
    action = ACTIONS.get(name)
    if action is None or not valid_execution_id(eid):
        return page(request, "missing.html", 404, what=f"action {name}")
    if (refused := await guard_execution(request, eid, "write")) is not None:
        if refused.status_code == 404:
            return page(request, "missing.html", 404, what=f"execution {eid}")
        return _forbidden()
    form = await form_data(request) if action.fields else {}
    if name in _WAIT_ACTIONS and (
        refusal := await signal_refusal(
            ctx_of(request).bus, ctx_of(request).catalog, eid, (form.get("signal") or "").strip(),
            principal_of(request),
        )
    ):
        await _audited(request, name, eid, form, reply_error(ForbiddenError(refusal)))
        return await execution_page(request, refused=refusal, form=form, status_code=403)
    form[_BY] = principal_of(request).name  # who acts (and answers an approval): never typed
    out = await action.run(ctx_of(request).bus, eid, form)
    await _audited(request, name, eid, form, out)
    if out is None:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    err = out.get("error") or {}
    if action.fields and err.get("kind") in _REFUSED:  # a button on a finished execution just reloads
        return await execution_page(
            request, refused=str(err.get("message")), form=form, status_code=_REFUSED[err["kind"]]
        )
    return RedirectResponse(f"/ui/executions/{eid}", status_code=303)


# --- catalog -------------------------------------------------------------------------------


# --- workers -------------------------------------------------------------------------------


async def workers_page(request: Request) -> Response:
    entries = await list_runtime(ctx_of(request).bus)
    servers = [e for e in entries if e.get("role") == "server"]
    pools: dict[str, dict[str, Any]] = {}
    for e in entries:
        if e.get("role") != "worker":
            continue
        pool = pools.setdefault(
            str(e.get("pool") or "default"), {"workers": [], "concurrency": 0, "running": 0}
        )
        pool["workers"].append(e)
        pool["concurrency"] += int(e.get("concurrency") or 0)
        pool["running"] += int(e.get("running") or 0)
    return page(request, "workers.html", servers=servers, pools=dict(sorted(pools.items())), nav="workers")


def _static() -> StaticFiles:
    return StaticFiles(directory=str(STATIC))


routes = [
    Route("/ui", home, methods=["GET"], include_in_schema=False),
    Route("/ui/login", login, methods=["GET"], include_in_schema=False),
    Route("/ui/login", login_post, methods=["POST"], include_in_schema=False),
    Route("/ui/logout", logout, methods=["POST"], include_in_schema=False),
    Route("/ui/executions", executions_page, methods=["GET"], include_in_schema=False),
    Route("/ui/executions/{execution_id}", execution_page, methods=["GET"], include_in_schema=False),
    Route("/ui/executions/{execution_id}/state", execution_state, methods=["GET"], include_in_schema=False),
    Route("/ui/executions/{execution_id}/events", execution_stream, methods=["GET"], include_in_schema=False),
    Route(
        "/ui/executions/{execution_id}/{action}", execution_action, methods=["POST"], include_in_schema=False
    ),
    Route("/ui/catalog", catalog_page, methods=["GET"], include_in_schema=False),
    Route("/ui/catalog/{path:path}", playbook_page, methods=["GET"], include_in_schema=False),
    Route("/ui/start", start_execution, methods=["POST"], include_in_schema=False),
    Route("/ui/workers", workers_page, methods=["GET"], include_in_schema=False),
    Mount("/ui/static", app=_static(), name="console-static"),
]

__all__ = ["ACTIONS", "Action", "routes"]
