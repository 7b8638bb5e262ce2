"""Outside input for running executions (SEMANTICS §17) and schedules (§18) over HTTP.

``POST /api/executions/{id}/signals/{name}``, ``.../pause`` and ``.../resume`` go through the same
client functions as ``noetl signal|pause|resume`` and the NATS endpoints, so all three refuse the
same things the same way: 404 for an execution that does not exist, 409 for one that has
finished, 400 for a bad name. ``/api/schedules`` manages schedules as ``noetl schedule`` does.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from noetl.client.run import pause, resume, signal
from noetl.dsl.errors import ForbiddenError, NoSuchEntityError, RequestInvalidError, reply_error
from noetl.server.api.context import body_error, ctx_of, error, guard_execution, json_body, principal_of
from noetl.server.api.queries import signal_refusal, valid_execution_id
from noetl.store.audit import record_action
from noetl.store.principals import namespace_of

_CODES = {
    "not_found": 404,
    "execution_finished": 409,
    "request_invalid": 400,
    "forbidden": 403,
    "signal_not_awaited": 409,
}


def _answer(out: dict[str, Any], ok: int = 202) -> JSONResponse:
    err = out.get("error")
    return JSONResponse(out, status_code=_CODES.get(err.get("kind"), 400) if err else ok)


async def _body(request: Request) -> tuple[dict[str, Any], Response | None]:
    try:
        body = await json_body(request)
    except ValueError as e:
        return {}, body_error(e)
    if body is None:
        return {}, None
    if not isinstance(body, dict):
        return {}, error(400, RequestInvalidError, "the body is a JSON object")
    return body, None


def _eid(request: Request) -> tuple[str, Response | None]:
    eid = request.path_params["execution_id"]
    if not valid_execution_id(eid):
        return eid, error(400, RequestInvalidError, f"{eid!r} is not an execution id")
    return eid, None


async def _target(request: Request) -> tuple[str, dict[str, Any], Response | None]:
    """The execution a signal or pause is for, and the request's body; or the refusal of either
    (also when the caller may not act in the execution's namespace)."""
    eid, bad = _eid(request)
    if bad or (bad := await guard_execution(request, eid, "write")):
        return eid, {}, bad
    body, bad = await _body(request)
    return eid, body, bad


async def _audited(request: Request, action: str, target: str, out: dict[str, Any]) -> dict[str, Any]:
    """``out`` after its record on the audit trail: who asked for what, and how it went."""
    err = out.get("error")
    await record_action(
        ctx_of(request).bus, action=action, principal=principal_of(request).name, target=target,
        outcome=err.get("kind", "refused") if err else "done",
    )
    return out


async def post_signal(request: Request) -> Response:
    """
    ---
    summary: Send a signal to an execution
    description: The first step run waiting for the signal (lifecycle.await) takes it and runs with
      args.signal holding `data`; with none waiting it is queued for the next. Refused for an
      execution that does not exist (404) or has finished (409).
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {data: {}, request_id: {type: string}}}
    responses:
      202: {description: "{execution_id, signal: sent, request_id}"}
      400: {description: bad signal name or body}
      404: {description: no such execution}
      409: {description: "the execution has finished, or signal_not_awaited: no step waits for or
        awaits that name (`?force=true` sends it anyway)"}
    """
    eid, body, bad = await _target(request)
    if bad:
        return bad
    name = request.path_params["name"]
    ctx = ctx_of(request)
    if refusal := await signal_refusal(ctx.bus, ctx.catalog, eid, name, principal_of(request)):
        refused = reply_error(ForbiddenError(refusal))
        return _answer(await _audited(request, "signal", f"{eid}/{name}", refused))
    force = request.query_params.get("force", "").lower() in ("1", "true", "yes") or body.get("force") is True
    out = await signal(
        ctx.bus, eid, name, body.get("data"), body.get("request_id"),
        principal=principal_of(request).name, force=force,
    )
    return _answer(await _audited(request, "signal", f"{eid}/{name}", out))


async def post_pause(request: Request) -> Response:
    """
    ---
    summary: Pause an execution
    description: Nothing new is scheduled until it is resumed (tokens that arrive wait, timers keep
      running); running step runs finish. Cancel works while paused.
    requestBody:
      content:
        application/json:
          schema: {type: object, properties: {reason: {type: string}}}
    responses:
      202: {description: "{execution_id, pause: sent, request_id}"}
      404: {description: no such execution}
      409: {description: the execution has finished}
    """
    eid, body, bad = await _target(request)
    if bad:
        return bad
    reason = body.get("reason")
    who = principal_of(request).name
    out = await pause(ctx_of(request).bus, eid, str(reason) if reason else None, principal=who)
    return _answer(await _audited(request, "pause", eid, out))


async def post_resume(request: Request) -> Response:
    """
    ---
    summary: Resume a paused execution
    description: The step runs held by the pause are scheduled, in the order their tokens came.
    responses:
      202: {description: "{execution_id, resume: sent, request_id}"}
      404: {description: no such execution}
      409: {description: the execution has finished}
    """
    eid, bad = _eid(request)
    if bad or (bad := await guard_execution(request, eid, "write")):
        return bad
    out = await resume(ctx_of(request).bus, eid, principal=principal_of(request).name)
    return _answer(await _audited(request, "resume", eid, out))


async def get_schedules(request: Request) -> Response:
    """
    ---
    summary: List schedules
    description: Every schedule with its cron, time zone, state and next fire time.
    responses:
      200: {description: "{schedules: [...]}"}
    """
    from noetl.store.schedules import ScheduleStore

    store = await ScheduleStore.open(ctx_of(request).bus)
    principal = principal_of(request)
    visible = [s for s in await store.list() if principal.may("read", namespace_of(s.get("path")))]
    return JSONResponse({"schedules": visible})


async def post_schedule(request: Request) -> Response:
    """
    ---
    summary: Add or replace a schedule
    description: Starts the catalog playbook `path` at every fire of `cron` (5 fields, or 6 with
      seconds first) in `timezone` (IANA, default UTC). Each fire is one execution whose request
      id derives from the schedule's name and the fire time.
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [path, cron]
            properties:
              path: {type: string}
              version: {type: string}
              cron: {type: string}
              timezone: {type: string}
              payload: {type: object}
              overlap: {type: string, enum: [skip, allow]}
    responses:
      201: {description: the schedule}
      400: {description: a bad name, cron expression or time zone}
    """
    from noetl.store.schedules import ScheduleStore

    body, bad = await _body(request)
    if bad:
        return bad
    store = await ScheduleStore.open(ctx_of(request).bus)
    name = request.path_params["name"]
    out = await store.add_request(name, body, principal_of(request))
    return _answer(await _audited(request, "schedule.add", name, out), 201)


async def schedule_action(request: Request) -> Response:
    """
    ---
    summary: Pause or resume a schedule
    description: A paused schedule does not fire; resuming it fires again from the next due time.
    responses:
      200: {description: the schedule}
      404: {description: no such schedule}
    """
    from noetl.store.schedules import ScheduleStore

    action = request.path_params["action"]
    if action not in ("pause", "resume"):
        return error(404, NoSuchEntityError, f"no schedule action {action!r}: use pause or resume")
    store = await ScheduleStore.open(ctx_of(request).bus)
    name = request.path_params["name"]
    out = await store.set_paused(name, action == "pause", principal_of(request))
    return _answer(await _audited(request, f"schedule.{action}", name, out), 200)


async def delete_schedule(request: Request) -> Response:
    """
    ---
    summary: Delete a schedule
    responses:
      200: {description: "{name, deleted: true}"}
      404: {description: no such schedule}
    """
    from noetl.store.schedules import ScheduleStore

    store = await ScheduleStore.open(ctx_of(request).bus)
    name = request.path_params["name"]
    out = await store.delete(name, principal_of(request))
    return _answer(await _audited(request, "schedule.delete", name, out), 200)


routes = [
    Route("/api/executions/{execution_id}/signals/{name}", post_signal, methods=["POST"]),
    Route("/api/executions/{execution_id}/pause", post_pause, methods=["POST"]),
    Route("/api/executions/{execution_id}/resume", post_resume, methods=["POST"]),
    Route("/api/schedules", get_schedules, methods=["GET"]),
    Route("/api/schedules/{name}", post_schedule, methods=["POST", "PUT"]),
    Route("/api/schedules/{name}", delete_schedule, methods=["DELETE"]),
    Route("/api/schedules/{name}/{action:str}", schedule_action, methods=["POST"]),
]
