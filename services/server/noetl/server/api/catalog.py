"""``/api/catalog``: register, list and read playbooks (the HTTP face of ``noetl catalog``).

A playbook is posted as its YAML text (what ``curl --data-binary @file.yaml`` sends) or wrapped
as ``{"playbook": text}``; both are validated before anything is stored, so the catalog never
holds a playbook that an execution request would reject.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from noetl.dsl.errors import (
    CatalogConflictError,
    ForbiddenError,
    NoSuchEntityError,
    PlaybookInvalidError,
    RequestInvalidError,
    reply_error,
)
from noetl.server.api.context import body_error, ctx_of, error, json_body, principal_of, read_body
from noetl.store.audit import record_action
from noetl.store.principals import namespace_of


async def register_playbook(request: Request) -> Response:
    """
    ---
    summary: Register a playbook under its metadata.path and version
    requestBody:
      content:
        application/yaml: {schema: {type: string}}
        application/json: {schema: {type: object, properties: {playbook: {type: string}}}}
    responses:
      201: {description: "{path, version, digest}"}
      422: {description: "playbook invalid: {error: {problems}}"}
    """
    if "json" in request.headers.get("content-type", ""):
        try:
            body = await json_body(request)
        except ValueError as e:
            return body_error(e)
        text = body.get("playbook") if isinstance(body, dict) else None
        if not isinstance(text, str):
            return error(400, RequestInvalidError, 'send the YAML text, or {"playbook": "<YAML text>"}')
    else:
        try:
            text = (await read_body(request)).decode()
        except UnicodeDecodeError:
            return error(400, RequestInvalidError, "the playbook must be UTF-8 text")
        except ValueError as e:
            return body_error(e)
    principal = principal_of(request)
    try:
        out = await ctx_of(request).catalog.register(text, "<request>", principal)
    except PlaybookInvalidError as e:
        return JSONResponse({"error": e.to_dict()}, status_code=422)
    except (ForbiddenError, CatalogConflictError) as e:
        await record_action(
            ctx_of(request).bus, action="catalog.register", principal=principal.name, target="<refused>",
            outcome=e.kind,
        )
        return JSONResponse(reply_error(e), status_code=403 if isinstance(e, ForbiddenError) else 409)
    await record_action(
        ctx_of(request).bus, action="catalog.register", principal=principal.name,
        target=f"{out['path']}@{out.get('version') or 'latest'}", namespace=namespace_of(out["path"]),
        digest=out["digest"],
    )
    return JSONResponse(out, status_code=201)


async def list_playbooks(request: Request) -> Response:
    """
    ---
    summary: Every registered playbook version
    responses:
      200: {description: "[{path, version, digest, name}]"}
    """
    principal = principal_of(request)
    entries = await ctx_of(request).catalog.list()
    return JSONResponse([e for e in entries if principal.may("read", namespace_of(e.get("path")))])


async def get_playbook(request: Request) -> Response:
    """
    ---
    summary: The text of a registered playbook (latest unless ?version=)
    parameters:
      - {name: version, in: query, schema: {type: string}}
    responses:
      200: {description: the YAML text, content: {application/yaml: {}}}
      404: {description: not in the catalog}
    """
    path, version = request.path_params["path"], request.query_params.get("version")
    visible = principal_of(request).may("read", namespace_of(path))
    text = await ctx_of(request).catalog.get(path, version) if visible else None
    if text is None:
        which = f"{path!r}{' version ' + version if version else ''}"
        return error(404, NoSuchEntityError, f"no playbook {which}")
    return PlainTextResponse(text, media_type="application/yaml")


routes = [
    Route("/api/catalog", register_playbook, methods=["POST"]),
    Route("/api/catalog", list_playbooks, methods=["GET"]),
    Route("/api/catalog/{path:path}", get_playbook, methods=["GET"]),
]
