"""Bearer-token auth for ``/api/*`` and the console's ``/ui``, as plain ASGI so streamed responses
(SSE) pass through untouched.

Health, readiness, metrics and the OpenAPI document stay open: probes and scrapers carry no
token. The admin token is accepted wherever the user token is, and is the only one that may read
a credential's value. Tokens are compared in constant time and never logged: a caller is named
by a hash prefix of its token.

A browser cannot add a header to a link or to an ``EventSource``, so the console also takes a
session cookie, set by its login form. The cookie holds an HMAC derived from the token, not the
token: a leaked cookie opens the console but not the API. ``/api/*`` keeps taking the header only,
so no cross-site form can reach the API through a cookie; the console's own forms check their
origin (``noetl.server.console``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import quote

from noetl.dsl.errors import UnauthorizedError, reply_error
from noetl.server.api.metrics import Metrics
from noetl.store.audit import token_id

PROTECTED_PREFIX = "/api/"
CONSOLE_PREFIX = "/ui"
CONSOLE_OPEN = ("/ui/login", "/ui/static/")  # the login form and its style sheet need no session
SESSION_COOKIE = "noetl_session"


def session_value(token: str) -> str:
    """The console cookie for ``token``: stable across replicas and restarts (no server state),
    and useless against ``/api/*``."""
    return hmac.new(token.encode(), b"noetl-console-session-v1", hashlib.sha256).hexdigest()


def is_console(path: str) -> bool:
    return path == CONSOLE_PREFIX or path.startswith(CONSOLE_PREFIX + "/")


def _cookie(scope: dict[str, Any], name: str) -> str | None:
    for header, value in scope.get("headers") or ():
        if header == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            try:
                jar.load(value.decode("latin-1"))
            except CookieError:
                continue
            if name in jar and jar[name].value:
                return jar[name].value
    return None


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            text: str = value.decode("latin-1")
            scheme, _, cred = text.partition(" ")
            if scheme.lower() == "bearer" and cred.strip():
                return cred.strip()
    return None


def _same(a: str | None, b: str | None) -> bool:
    return bool(a and b) and hmac.compare_digest(a.encode(), b.encode())  # type: ignore[union-attr]


class BearerAuth:
    def __init__(self, app: Any, token: str | None, admin_token: str | None, metrics: Metrics) -> None:
        self.app, self.token, self.admin_token, self.metrics = app, token, admin_token, metrics

    def identify(self, presented: str | None) -> dict[str, str] | None:
        if _same(presented, self.admin_token):
            return {"role": "admin", "who": token_id(presented)}
        if _same(presented, self.token):
            return {"role": "user", "who": token_id(presented)}
        if not self.token:
            return {"role": "anonymous", "who": token_id(presented) if presented else "anonymous"}
        return None

    def identify_session(self, cookie: str | None) -> dict[str, str] | None:
        """A console session cookie, named like the token it was derived from."""
        for role, token in (("admin", self.admin_token), ("user", self.token)):
            if token and _same(cookie, session_value(token)):
                return {"role": role, "who": token_id(token)}
        return None if self.token else {"role": "anonymous", "who": "anonymous"}

    def identify_console(self, scope: dict[str, Any]) -> dict[str, str] | None:
        bearer = _bearer(scope)
        return self.identify(bearer) if bearer else self.identify_session(_cookie(scope, SESSION_COOKIE))

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def send_counted(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if scope["path"].startswith(PROTECTED_PREFIX):
                who = self.identify(_bearer(scope))
                if who is None:
                    await _unauthorized(send_counted)
                    return
                scope["noetl.auth"] = who
            elif is_console(scope["path"]) and not scope["path"].startswith(CONSOLE_OPEN):
                who = self.identify_console(scope)
                if who is None:
                    await _to_login(scope, send_counted)
                    return
                scope["noetl.auth"] = who
            await self.app(scope, receive, send_counted)
        finally:
            endpoint = scope.get("endpoint")
            name = getattr(endpoint, "__name__", None) or (
                "unauthorized" if status["code"] == 401 else "none"
            )
            self.metrics.observe_http(scope["method"], name, status["code"], time.perf_counter() - started)


async def _unauthorized(send: Any) -> None:
    body = json.dumps(reply_error(UnauthorizedError("send `Authorization: Bearer <token>`"))).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="noetl"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def _to_login(scope: dict[str, Any], send: Any) -> None:
    """A page asked for without a session goes to the login form, which comes back to it."""
    target = scope["path"] + (
        "?" + scope["query_string"].decode("latin-1") if scope.get("query_string") else ""
    )
    location = "/ui/login?next=" + quote(target, safe="")
    await send(
        {
            "type": "http.response.start",
            "status": 303 if scope["method"] in ("GET", "HEAD") else 401,
            "headers": [(b"location", location.encode()), (b"content-length", b"0")],
        }
    )
    await send({"type": "http.response.body", "body": b""})
