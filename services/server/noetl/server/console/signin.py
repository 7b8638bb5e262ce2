"""Signing in to the console: the login form, the session cookie, same-origin checks of forms.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from noetl.server.api.auth import SESSION_COOKIE, session_value
from noetl.server.api.context import ctx_of, principal_of, read_body
from noetl.server.console.render import page


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


def form_payload(form: dict[str, str]) -> dict[str, Any] | str:
    """The form's ``payload`` field as a JSON object (empty: ``{}``), or why it is not one."""
    try:
        payload = json.loads(form.get("payload") or "{}")
    except ValueError as e:
        return f"the payload is not JSON: {e}"
    return payload if isinstance(payload, dict) else "the payload must be a JSON object"


def _safe_next(target: str | None) -> str:
    """Only a console path: a login link must not be able to send the browser elsewhere."""
    if target and target.startswith("/ui") and not target.startswith("//") and "\\" not in target:
        return target
    return "/ui/executions"


def _forbidden() -> Response:
    return Response("cross-site request refused", status_code=403, media_type="text/plain")


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
