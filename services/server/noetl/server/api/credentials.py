"""``/api/credentials`` (source spec 004 §5.1): keychain entries over HTTP.

Listing and metadata never carry a value. A value leaves the server only for an admin token
(``?include_data=true``), and only after the read is recorded in ``NOETL_AUDIT``: an audit record
that cannot be stored refuses the read. Denied attempts are recorded as well, since probing is
what an audit trail is for. Writes and deletes are recorded too.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from noetl.dsl.errors import ForbiddenError, KeychainUnresolvedError, NoSuchEntityError, RequestInvalidError
from noetl.events.masking import weak_refusal
from noetl.server.api.context import auth_of, body_error, ctx_of, error, json_body
from noetl.store.audit import record_credential_access
from noetl.store.credentials import check_name, check_scope


async def _audit(request: Request, action: str, name: str, outcome: str, kind: str | None = None) -> None:
    q = request.query_params
    await record_credential_access(
        ctx_of(request).bus,
        action=action,
        credential=name,
        who=auth_of(request)["who"],
        outcome=outcome,
        execution_id=q.get("execution_id"),
        parent_execution_id=q.get("parent_execution_id"),
        kind=kind,
        remote=request.client.host if request.client else None,
    )


def _forbidden_to_manage(request: Request) -> Response | None:
    """Creating, replacing and deleting credentials is an admin's: a user token may run playbooks,
    and a user who could write a credential could point one at their own server. Without any
    token configured (a loopback-only API) there are no roles to tell apart."""
    if auth_of(request)["role"] == "admin":  # an API without principals: anonymous is an admin
        return None
    return error(403, ForbiddenError, "managing credentials needs the admin token (NOETL_API_ADMIN_TOKEN)")


def _name(request: Request) -> str | None:
    try:
        return check_name(request.path_params["name"])
    except ValueError:
        return None


async def put_credential(request: Request) -> Response:
    """
    ---
    summary: Create or replace a credential (stored encrypted)
    requestBody:
      content:
        application/json:
          schema:
            type: object
            required: [name, data]
            properties:
              name: {type: string}
              kind: {type: string}
              data: {type: object}
              scope: {type: object, description: "{paths: [catalog path, prefix/ or *], inline: bool}"}
    responses:
      201: {description: "{name, kind, scope}"}
      403: {description: not the admin token}
      503: {description: the server has no credentials key}
    """
    if (denied := _forbidden_to_manage(request)) is not None:
        await _audit(request, "credential.put", str(request.path_params.get("name", "?")), "denied")
        return denied
    try:
        body = await json_body(request)
    except ValueError as e:
        return body_error(e)
    if not isinstance(body, dict) or not isinstance(body.get("data"), dict):
        return error(400, RequestInvalidError, 'send {"name": ..., "kind": ..., "data": {...}}')
    name, kind = body.get("name"), body.get("kind") or "secret"
    try:
        check_name(name)  # type: ignore[arg-type]
    except ValueError as e:
        return error(400, RequestInvalidError, str(e))
    if not isinstance(kind, str):
        return error(400, RequestInvalidError, "`kind` must be a string")
    try:
        scope = check_scope(body.get("scope"))
    except ValueError as e:
        return error(400, RequestInvalidError, str(e))
    if refusal := weak_refusal(name, body["data"], kind):  # type: ignore[arg-type]
        return error(400, RequestInvalidError, refusal)
    try:
        await ctx_of(request).credentials.put(name, kind, body["data"], scope)
    except KeychainUnresolvedError as e:
        return error(503, KeychainUnresolvedError, e.message)
    await _audit(request, "credential.put", name, "stored", kind)  # type: ignore[arg-type]
    return JSONResponse({"name": name, "kind": kind, "scope": scope}, status_code=201)


async def list_credentials(request: Request) -> Response:
    """
    ---
    summary: Names and kinds of every credential, never a value
    responses:
      200: {description: "[{name, kind}]"}
    """
    return JSONResponse(await ctx_of(request).credentials.list())


async def get_credential(request: Request) -> Response:
    """
    ---
    summary: A credential's metadata; its data only for an admin token, audited
    parameters:
      - {name: include_data, in: query, schema: {type: boolean}}
      - {name: execution_id, in: query, schema: {type: string}}
      - {name: parent_execution_id, in: query, schema: {type: string}}
    responses:
      200: {description: "{name, kind} (and data with include_data)"}
      403: {description: include_data without the admin token}
      404: {description: no such credential}
    """
    name = _name(request)
    if name is None:
        return error(400, RequestInvalidError, "invalid credential name")
    store = ctx_of(request).credentials
    record: dict[str, Any] | None = await store._record(name)
    if record is None:
        return error(404, NoSuchEntityError, f"no credential {name!r}")
    out: dict[str, Any] = {"name": name, "kind": record.get("kind")}
    if request.query_params.get("include_data", "").lower() not in ("1", "true", "yes"):
        return JSONResponse(out)
    if auth_of(request)["role"] != "admin" or auth_of(request)["name"] == "anonymous":
        # reading a value needs an admin who showed a token: an API without principals never serves one
        await _audit(request, "credential.read", name, "denied", out["kind"])
        return error(403, ForbiddenError, "include_data needs the admin token (NOETL_API_ADMIN_TOKEN)")
    try:
        got = await store.get(name)
    except KeychainUnresolvedError as e:
        await _audit(request, "credential.read", name, "failed", out["kind"])
        return error(503, KeychainUnresolvedError, e.message)
    if got is None:  # deleted between the two reads
        return error(404, NoSuchEntityError, f"no credential {name!r}")
    await _audit(request, "credential.read", name, "granted", out["kind"])
    out["data"] = got["data"]
    return JSONResponse(out)


async def delete_credential(request: Request) -> Response:
    """
    ---
    summary: Delete a credential with its stored history
    responses:
      204: {description: deleted}
      404: {description: no such credential}
    """
    name = _name(request)
    if name is None:
        return error(400, RequestInvalidError, "invalid credential name")
    if (denied := _forbidden_to_manage(request)) is not None:
        await _audit(request, "credential.delete", name, "denied")
        return denied
    store = ctx_of(request).credentials
    if not await store.exists(name):
        return error(404, NoSuchEntityError, f"no credential {name!r}")
    await store.delete(name)
    await _audit(request, "credential.delete", name, "deleted")
    return Response(status_code=204)


routes = [
    Route("/api/credentials", put_credential, methods=["POST"]),
    Route("/api/credentials", list_credentials, methods=["GET"]),
    Route("/api/credentials/{name}", get_credential, methods=["GET"]),
    Route("/api/credentials/{name}", delete_credential, methods=["DELETE"]),
]
