"""The console's catalog pages: the list, one playbook with its workload form, and starting
an execution from it.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from noetl.dsl.errors import PlaybookInvalidError
from noetl.dsl.validate import load_playbook
from noetl.server.api.context import ctx_of, principal_of
from noetl.server.api.queries import list_executions
from noetl.server.console.graph import Graph, layout
from noetl.server.console.render import page
from noetl.server.console.signin import _forbidden, form_data, form_payload, same_origin
from noetl.store.principals import namespace_of


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
    payload = form_payload(form)
    if isinstance(payload, str):
        return await playbook_page(request, error=payload, form=form, status_code=400)
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
