"""``/api/executions``: start, list, inspect, follow and cancel executions over HTTP.

Starting goes through the same ``RequestHandler`` as a request on NATS, so both paths accept and
reject exactly the same requests and derive the same execution ids. Without a ``request_id`` (or
an ``Idempotency-Key`` header) every POST starts a new execution, as a client of an HTTP API
expects; with one, a retried POST returns the execution the first one started.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from noetl.client.run import cancel as request_cancel
from noetl.dsl.errors import NoSuchEntityError, RequestInvalidError
from noetl.server.api.context import (
    ApiContext,
    body_error,
    ctx_of,
    error,
    guard_execution,
    json_body,
    principal_of,
    read_body,
)
from noetl.server.api.execution_parts import (
    _id_or_error,
    get_execution_iterations,
    get_execution_lineage,
    get_execution_tasks,
)
from noetl.server.api.follow import follow_events
from noetl.server.api.queries import (
    execution_logs,
    execution_status,
    list_executions,
    request_status_code,
)
from noetl.store.audit import record_action
from noetl.store.principals import Principal

if TYPE_CHECKING:  # the handlers import the rerun module as they run; only its type is needed here
    from noetl.server.rerun import Rerun

KEEPALIVE_SECONDS = 15.0


async def create_execution(request: Request) -> Response:
    """
    ---
    summary: Start an execution
    description: Same validation as noetl.requests.execute. 400 when the request is malformed,
      422 with every problem when the playbook is invalid.
    requestBody:
      content:
        application/json:
          schema:
            type: object
            properties:
              path: {type: string}
              version: {type: string}
              playbook: {type: string, description: inline playbook YAML}
              payload: {type: object}
              request_id: {type: string}
    responses:
      202: {description: "accepted: {execution_id}"}
      400: {description: "request invalid: {error}"}
      422: {description: "playbook invalid: {execution_id, error: {problems}}"}
    """
    ctx = ctx_of(request)
    try:
        data = await read_body(request)
    except ValueError as e:
        return body_error(e)
    msg_id = request.headers.get("idempotency-key") or uuid.uuid4().hex
    reply = await ctx.requests.handle(data, msg_id, principal=principal_of(request))
    return JSONResponse(reply, status_code=request_status_code(reply))


async def get_executions(request: Request) -> Response:
    """
    ---
    summary: List executions, newest first
    parameters:
      - {name: status, in: query, schema: {type: string, enum: [running, success, failed, cancelled]}}
      - {name: path, in: query, schema: {type: string}}
      - {name: limit, in: query, schema: {type: integer, default: 100, maximum: 1000}}
      - {name: before, in: query, description: next_cursor of the previous page, schema: {type: integer}}
    responses:
      200: {description: "{executions: [...], next_cursor}"}
    """
    q = request.query_params
    try:
        limit = int(q.get("limit", "100"))
        before = int(q["before"]) if q.get("before") else None
    except ValueError:
        return error(400, RequestInvalidError, "limit and before must be integers")
    principal = principal_of(request)
    out = await list_executions(
        ctx_of(request).bus, status=q.get("status"), path=q.get("path"), limit=limit, before=before,
        visible=lambda namespace: principal.may("read", namespace),
    )
    return JSONResponse(out)


async def get_execution(request: Request) -> Response:
    """
    ---
    summary: Status, ctx, step runs and result of one execution
    responses:
      200: {description: "{execution_id, status, result, ctx, error, steps, path, ...}"}
      404: {description: no event of this execution}
    """
    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    out = await execution_status(ctx_of(request).bus, eid)
    if out is None:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    return JSONResponse(out)


async def get_execution_events(request: Request) -> Response:
    """
    ---
    summary: The events of one execution
    description: A JSON list; with `Accept text/event-stream` a server-sent event stream that
      replays the stored events, follows new ones and ends after playbook.processed
      (`Last-Event-ID` resumes).
    responses:
      200: {description: "[event, ...] or text/event-stream"}
      404: {description: no event of this execution (JSON form only)}
    """
    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    ctx = ctx_of(request)
    if "text/event-stream" in request.headers.get("accept", ""):
        after = request.headers.get("last-event-id") or None
        return StreamingResponse(
            _sse(ctx.bus, eid, after, ctx.closing),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    events = [ev async for ev in follow_events(ctx.bus, eid, follow=False) if ev is not None]
    if not events:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    return JSONResponse(events)


async def get_execution_logs(request: Request) -> Response:
    """
    ---
    summary: What the execution's task runs printed or logged
    description: One entry per task run that wrote something, in log order; each output is
      masked and capped at 64 KiB (a marker says what was cut). Output stored by reference is
      read back from the object store.
    parameters:
      - {name: step, in: query, description: only this step's task runs, schema: {type: string}}
    responses:
      200: {description: "{execution_id, logs: [{step, task, index?, attempt?, task_run_id, timestamp,
        status, output}]}"}
      404: {description: no event of this execution}
    """
    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "read")):
        return bad
    logs = await execution_logs(ctx_of(request).bus, eid, request.query_params.get("step") or None)
    if logs is None:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    return JSONResponse({"execution_id": eid, "logs": logs})


def sse_frame(event: dict[str, Any]) -> str:
    """One SSE message; its ``id`` is the event id, so a reconnecting client resumes after it."""
    return f"id: {event.get('event_id', '')}\ndata: {json.dumps(event, default=str)}\n\n"


async def _sse(bus: Any, eid: str, after: str | None, closing: asyncio.Event) -> AsyncIterator[str]:
    yield ": noetl events of " + eid + "\n\n"
    async for ev in follow_events(bus, eid, after_event_id=after, stop=closing, idle=KEEPALIVE_SECONDS):
        yield ": keep-alive\n\n" if ev is None else sse_frame(ev)


async def cancel_execution(request: Request) -> Response:
    """
    ---
    summary: Ask for an execution to be cancelled
    description: Publishes {execution_id, reason} to noetl.requests.cancel; running steps stop
      and the execution finishes as cancelled.
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {reason: {type: string}}}
    responses:
      202: {description: "{execution_id, cancel: requested}"}
      404: {description: no such execution}
    """
    eid, bad = _id_or_error(request)
    if bad or (bad := await guard_execution(request, eid, "write")):
        return bad
    try:
        body = await json_body(request)
    except ValueError as e:
        return body_error(e)
    reason = body.get("reason") if isinstance(body, dict) else None
    out = await request_cancel(
        ctx_of(request).bus, eid, str(reason) if reason else None, principal=principal_of(request).name
    )
    await record_action(
        ctx_of(request).bus, action="cancel", principal=principal_of(request).name, target=eid,
        outcome="not_found" if out is None else "done",
    )
    if out is None:
        return error(404, NoSuchEntityError, f"no execution {eid}")
    return JSONResponse(out, status_code=202)


async def rerun_execution(request: Request) -> Response:
    """
    ---
    summary: Rerun an execution from a step (a fork of its log)
    description: A new execution linked to this one (its execution.forked event) that takes the
      original's ctx and step results up to the chosen step and continues from there, with the
      payload merged over the original's and optionally another playbook. Without `from` it
      continues from the steps that failed. The answer says what is kept and what is not;
      `dry_run` answers that without starting anything.
    requestBody:
      content:
        application/json:
          schema:
            type: object
            properties:
              from: {type: string, description: the step to continue from}
              payload: {type: object, description: merged over the original request's payload}
              playbook: {type: string, description: a new playbook's YAML text}
              version: {type: string, description: another catalog version of the original's path}
              request_id: {type: string}
              dry_run: {type: boolean}
    responses:
      202: {description: "{execution_id, from_execution_id, from_steps, kept, not_kept}"}
      200: {description: "dry_run: the same without execution_id"}
      400: {description: "request invalid: {error}"}
      403: {description: "forbidden: the caller may read the execution but not act on it, or may
        not start executions where the rerun would run"}
      404: {description: no such execution (or one of a namespace the caller may not read)}
      409: {description: "rerun_refused: {error} saying why and what to do"}
    """
    from noetl.server.rerun import prepare_rerun, rerun_options

    eid, bad = _id_or_error(request)
    # a rerun acts on the original (its ctx, its results): the caller must be one that may act on
    # it, as for a cancel; the new execution is then checked like any request of the caller's
    if bad or (bad := await guard_execution(request, eid, "write")):
        return bad
    try:
        body = await json_body(request)
    except ValueError as e:
        return body_error(e)
    body = body if isinstance(body, dict) else {}
    options = rerun_options(body)
    if isinstance(options, str):
        return error(400, RequestInvalidError, options)
    ctx = ctx_of(request)
    got = await prepare_rerun(ctx.bus, ctx.catalog, eid, **options)
    if isinstance(got, dict):
        return JSONResponse(got, status_code=404 if got["error"]["kind"] == "not_found" else 409)
    if body.get("dry_run"):
        return JSONResponse(got.to_dict())
    return await _start_rerun(ctx, got, eid, principal_of(request))


async def _start_rerun(ctx: ApiContext, got: Rerun, eid: str, principal: Principal) -> Response:
    """Start a prepared rerun as the caller, and audit it either way: a rerun acts on another
    execution's ctx and results, so who did it is kept even when the request is refused."""
    from noetl.server.rerun import start_rerun

    out = got.to_dict()
    reply = await start_rerun(ctx.requests, got, principal)
    err = reply.get("error")
    await record_action(
        ctx.bus, action="rerun", principal=principal.name, target=eid,
        outcome=err.get("kind", "refused") if err else "done", execution_id=reply.get("execution_id"),
    )
    if err:
        return JSONResponse({**out, **reply}, status_code=request_status_code(reply))
    return JSONResponse({**out, **reply}, status_code=202)


routes = [
    Route("/api/executions", create_execution, methods=["POST"]),
    Route("/api/executions", get_executions, methods=["GET"]),
    Route("/api/executions/{execution_id}", get_execution, methods=["GET"]),
    Route("/api/executions/{execution_id}/events", get_execution_events, methods=["GET"]),
    Route("/api/executions/{execution_id}/logs", get_execution_logs, methods=["GET"]),
    Route("/api/executions/{execution_id}/cancel", cancel_execution, methods=["POST"]),
    Route("/api/executions/{execution_id}/rerun", rerun_execution, methods=["POST"]),
    Route("/api/executions/{execution_id}/iterations", get_execution_iterations, methods=["GET"]),
    Route("/api/executions/{execution_id}/lineage", get_execution_lineage, methods=["GET"]),
    Route("/api/executions/{execution_id}/tasks", get_execution_tasks, methods=["GET"]),
]
