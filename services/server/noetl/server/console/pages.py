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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from noetl.client.run import cancel as request_cancel
from noetl.client.run import pause as request_pause
from noetl.client.run import resume as request_resume
from noetl.client.run import signal as request_signal
from noetl.dsl.errors import PlaybookInvalidError, RequestInvalidError, reply_error
from noetl.dsl.validate import load_playbook
from noetl.events.bus import read_execution_events
from noetl.events.envelope import Event
from noetl.events.runtime import list_runtime
from noetl.server.api.auth import SESSION_COOKIE, session_value
from noetl.server.api.context import ctx_of, guard_execution, principal_of, read_body
from noetl.server.api.follow import follow_events
from noetl.server.api.queries import list_executions, signal_refusal, stall_of, valid_execution_id
from noetl.server.console.fold import ExecutionView, duration_ms, fold
from noetl.server.console.graph import Graph, layout
from noetl.server.console.render import STATIC, page, render
from noetl.server.lineage import children_of, reruns_of
from noetl.store.principals import namespace_of

STATUSES = ("running", "success", "failed", "cancelled")
PAGE_SIZE = 50
KEEPALIVE_SECONDS = 15.0
_GRAPHS: dict[str, Graph | None] = {}  # by playbook digest: a digest's text never changes
_MAX_GRAPHS = 256


@dataclass(frozen=True)
class Action:
    """A control on the execution page (cancel, pause, resume, signal); the page shows whichever
    apply to the execution's status. ``fields`` are what its form posts besides the request id
    (a signal needs a name and its data; the buttons post nothing)."""

    name: str
    label: str
    shown_when: frozenset[str]
    confirm: str
    run: Callable[[Any, str, dict[str, str]], Awaitable[dict[str, Any] | None]]
    fields: tuple[str, ...] = ()


_BY = "\0principal"  # the form key an action's caller rides under: no browser field can be named so


async def _cancel(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await request_cancel(bus, execution_id, "cancelled from the console", principal=form.get(_BY))


async def _outside(out: dict[str, Any]) -> dict[str, Any] | None:
    """None (the page's 404) for an execution that does not exist; a refusal otherwise is kept, so
    the page can say why (a signal's bad name or data)."""
    return None if (out.get("error") or {}).get("kind") == "not_found" else out


async def _pause(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    out = await request_pause(bus, execution_id, "paused from the console", principal=form.get(_BY))
    return await _outside(out)


async def _resume(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _outside(await request_resume(bus, execution_id, principal=form.get(_BY)))


async def _signal(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    """The signal form: its data is JSON (empty sends none); the request id the page was rendered
    with makes a double click one signal, not a second one queued for the next wait."""
    text = (form.get("data") or "").strip()
    try:
        data = json.loads(text) if text else None
    except ValueError as e:
        return reply_error(RequestInvalidError(f"the signal's data is not JSON: {e}"))
    name = (form.get("signal") or "").strip()
    return await _outside(
        await request_signal(
            bus, execution_id, name, data, form.get("request_id") or None, principal=form.get(_BY)
        )
    )


async def _answer(bus: Any, execution_id: str, form: dict[str, str], approved: bool) -> dict[str, Any] | None:
    """Approve / Reject: the signal the step waits for, with ``{"approved": ..., "by": ...}``;
    ``by`` is the signed-in principal (the page sets it, never the form)."""
    name = (form.get("signal") or "").strip()
    by = form.get(_BY) or "anonymous"
    data = {"approved": approved, "by": by}
    request_id = form.get("request_id") or None
    out = await request_signal(bus, execution_id, name, data, request_id, principal=form.get(_BY))
    return await _outside(out)


async def _approve(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _answer(bus, execution_id, form, True)


async def _reject(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _answer(bus, execution_id, form, False)


ACTIONS: dict[str, Action] = {
    "pause": Action(
        "pause", "Pause", frozenset({"running"}), "Pause: schedule nothing new until resumed?", _pause
    ),
    "resume": Action("resume", "Resume", frozenset({"running"}), "Resume this execution?", _resume),
    "cancel": Action("cancel", "Cancel", frozenset({"running"}), "Cancel this execution?", _cancel),
    "signal": Action(
        "signal", "Send signal", frozenset({"running"}), "Send this signal?", _signal, ("signal", "data")
    ),
    "approve": Action("approve", "Approve", frozenset({"running"}), "Approve?", _approve, ("signal",)),
    "reject": Action("reject", "Reject", frozenset({"running"}), "Reject?", _reject, ("signal",)),
}
_WAIT_ACTIONS = ("signal", "approve", "reject")  # shown only while a step run waits for a signal
# what the page says when an action is refused, by error kind (as the API answers)
_REFUSED = {"request_invalid": 400, "execution_finished": 409, "signal_not_awaited": 409}


def actions_for(view: ExecutionView) -> list[Action]:
    if view.finished_at is not None:
        return []
    return [
        a
        for a in ACTIONS.values()
        if view.status in a.shown_when
        and not (a.name in ("cancel", *_WAIT_ACTIONS) and view.cancel_requested)
        and not (a.name in _WAIT_ACTIONS and not view.waiting)
        and not (a.name == "pause" and (view.paused or view.cancel_requested))
        and not (a.name == "resume" and not view.paused)
    ]


def same_origin(request: Request) -> bool:
    """A state-changing post must come from a page of this server (browsers send ``Origin`` on
    every post; ``Sec-Fetch-Site`` covers the rest)."""
    origin = request.headers.get("origin")
    if origin:
        return urlsplit(origin).netloc == request.headers.get("host", "")
    return request.headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


async def form_data(request: Request) -> dict[str, str]:
    """An urlencoded form without python-multipart (the only encoding these forms use)."""
    raw = await read_body(request, 256 * 1024)
    return {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}


def _safe_next(target: str | None) -> str:
    """Only a console path: a login link must not be able to send the browser elsewhere."""
    if target and target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/executions"


def _forbidden() -> Response:
    return Response("cross-site request refused", status_code=403, media_type="text/plain")


# --- login ---------------------------------------------------------------------------------


def _token_of(ctx: Any, presented: str) -> str | None:
    """``presented`` when it is a principal's token (compared in constant time), else None."""
    if presented and ctx.principals.required and ctx.principals.identify(presented) is not None:
        return presented
    return None


async def _signed_in(request: Request, token: str, target: str) -> Response:
    ctx = ctx_of(request)
    principal = ctx.principals.identify(token)
    generation = await ctx.sessions.get(principal.name) if principal is not None else 0
    response = RedirectResponse(_safe_next(target), status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_value(token, generation),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/ui",
    )
    return response


async def login(request: Request) -> Response:
    ctx = ctx_of(request)
    target = request.query_params.get("next")
    if not ctx.principals.required:  # no principal configured: the console is as open as the API
        return RedirectResponse(_safe_next(target), status_code=303)
    presented = request.query_params.get("token")
    if presented:  # a link printed by `noetl run --ui`; the redirect drops the token from the address
        token = _token_of(ctx, presented)
        if token:
            return await _signed_in(request, token, target or "/ui/executions")
        return page(request, "login.html", 401, next=_safe_next(target), failed=True)
    return page(request, "login.html", next=_safe_next(target), failed=False)


async def login_post(request: Request) -> Response:
    ctx = ctx_of(request)
    if not same_origin(request):
        return _forbidden()
    form = await form_data(request)
    target = form.get("next")
    token = _token_of(ctx, form.get("token", "").strip())
    if not token:
        return page(request, "login.html", 401, next=_safe_next(target), failed=True)
    return await _signed_in(request, token, target or "/ui/executions")


async def logout(request: Request) -> Response:
    """Signs the principal out everywhere: its session generation goes up, so this cookie, and any
    copy of it, opens nothing any more (on every replica: the generation is in KV)."""
    if not same_origin(request):
        return _forbidden()
    principal = principal_of(request)
    if ctx_of(request).principals.required and principal.name != "anonymous":
        await ctx_of(request).sessions.bump(principal.name)
    response = RedirectResponse("/ui/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/ui", httponly=True, samesite="strict")
    return response


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
        return await execution_page(request, refused=refusal, form=form, status_code=403)
    form[_BY] = principal_of(request).name  # who acts (and answers an approval): never typed
    out = await action.run(ctx_of(request).bus, eid, form)
    if out is None:
        return page(request, "missing.html", 404, what=f"execution {eid}")
    err = out.get("error") or {}
    if action.fields and err.get("kind") in _REFUSED:  # a button on a finished execution just reloads
        return await execution_page(
            request, refused=str(err.get("message")), form=form, status_code=_REFUSED[err["kind"]]
        )
    return RedirectResponse(f"/ui/executions/{eid}", status_code=303)


# --- catalog -------------------------------------------------------------------------------


async def catalog_page(request: Request) -> Response:
    principal = principal_of(request)
    entries = [
        e for e in await ctx_of(request).catalog.list() if principal.may("read", namespace_of(e["path"]))
    ]
    by_path: dict[str, dict[str, Any]] = {}
    for e in entries:
        item = by_path.setdefault(e["path"], {"path": e["path"], "name": e.get("name"), "versions": []})
        if e.get("version"):
            item["versions"].append(e["version"])
        item["digest"] = e.get("digest")
    return page(request, "catalog.html", playbooks=list(by_path.values()), nav="catalog")


async def playbook_page(
    request: Request, *, error: str | None = None, form: dict[str, str] | None = None, status_code: int = 200
) -> Response:
    ctx = ctx_of(request)
    path = request.path_params.get("path") or (form or {}).get("path", "")
    version = request.query_params.get("version") or (form or {}).get("version") or None
    principal = principal_of(request)
    readable = principal.may("read", namespace_of(path))
    text = await ctx.catalog.get(path, version) if readable else None
    if text is None:
        return page(
            request, "missing.html", 404, what=f"playbook {path}" + (f" version {version}" if version else "")
        )
    try:
        playbook = load_playbook(text, path)
        graph: Graph | None = layout(playbook)
        workload = playbook.workload
        description = playbook.metadata.description
    except PlaybookInvalidError:
        graph, workload, description = None, {}, None
    versions = [e.get("version") for e in await ctx.catalog.list() if e["path"] == path and e.get("version")]
    # the path filter takes a prefix: `job` also finds `jobs/...`, which may be another namespace's
    recent = (
        await list_executions(
            ctx.bus, path=path, limit=10, visible=lambda namespace: principal.may("read", namespace)
        )
    )["executions"]
    return page(
        request,
        "playbook.html",
        status_code,
        path=path,
        version=version,
        versions=versions,
        text=text,
        graph=graph,
        workload=workload,
        fields=workload_fields(workload if isinstance(workload, dict) else {}),
        typed={k[2:]: v for k, v in (form or {}).items() if k.startswith("w:")},
        description=description,
        recent=recent,
        error=error,
        payload=(form or {}).get("payload", "{}"),
        request_id=uuid.uuid4().hex,
        nav="catalog",
    )


def workload_fields(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The start form's typed fields (issue 31): one per top-level workload key, typed from its
    default (a number, a yes/no, a text; a list or mapping as JSON), the raw JSON payload staying
    the fallback for anything else."""
    out = []
    for key, value in workload.items():
        if isinstance(value, bool):
            kind, text = "bool", "true" if value else "false"
        elif isinstance(value, int):
            kind, text = "int", str(value)
        elif isinstance(value, float):
            kind, text = "float", repr(value)
        elif isinstance(value, str):
            kind, text = "str", value
        else:
            kind, text = "json", json.dumps(value)
        out.append({"key": str(key), "kind": kind, "value": text})
    return out


def _typed_payload(form: dict[str, str]) -> dict[str, Any]:
    """The typed fields' values (``w:KEY`` with its type in ``t:KEY``); ValueError names a field
    whose text is not of its type."""
    out: dict[str, Any] = {}
    for name, text in form.items():
        if not name.startswith("w:"):
            continue
        key, kind = name[2:], form.get("t:" + name[2:], "str")
        try:
            if kind == "int":
                out[key] = int(text)
            elif kind == "float":
                out[key] = float(text)
            elif kind == "bool":
                out[key] = text == "true"
            elif kind == "json":
                out[key] = json.loads(text)
            else:
                out[key] = text
        except ValueError:
            raise ValueError(f"field {key!r} needs a {kind} value, not {text!r}") from None
    return out


async def start_execution(request: Request) -> Response:
    if not same_origin(request):
        return _forbidden()
    form = await form_data(request)
    try:
        typed = _typed_payload(form)
    except ValueError as e:
        return await playbook_page(request, error=str(e), form=form, status_code=400)
    try:
        payload = json.loads(form.get("payload") or "{}")
    except ValueError as e:
        return await playbook_page(request, error=f"the payload is not JSON: {e}", form=form, status_code=400)
    if not isinstance(payload, dict):
        return await playbook_page(
            request, error="the payload must be a JSON object", form=form, status_code=400
        )
    payload = {**typed, **payload}  # the raw JSON is the fallback: what it names wins
    body: dict[str, Any] = {"path": form.get("path", ""), "payload": payload}
    if form.get("version"):
        body["version"] = form["version"]
    request_id = form.get("request_id") or uuid.uuid4().hex  # a double-clicked button starts one execution
    body["request_id"] = request_id
    reply = await ctx_of(request).requests.handle(
        json.dumps(body).encode(), request_id, principal=principal_of(request)
    )
    if reply.get("error") and not reply.get("execution_id"):
        err = reply["error"]
        return await playbook_page(
            request, error=f"{err.get('kind')}: {err.get('message')}", form=form, status_code=400
        )
    return RedirectResponse(f"/ui/executions/{reply['execution_id']}", status_code=303)


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
