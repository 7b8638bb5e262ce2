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
from noetl.store.principals import ANONYMOUS, Principal, Principals

PROTECTED_PREFIX = "/api/"
CONSOLE_PREFIX = "/ui"
CONSOLE_OPEN = ("/ui/login", "/ui/static/")  # the login form and its style sheet need no session
SESSION_COOKIE = "noetl_session"


def session_value(token: str, generation: int = 0) -> str:
    """The console cookie for ``token``: the same on every replica, and useless against
    ``/api/*``. Derived from the token's SHA-256 (so a principal configured by ``token_sha256``
    alone gets a cookie too) and the principal's session generation, which signing out raises:
    every cookie issued before is void from then on (``SessionGenerations``)."""
    return session_of_sha(hashlib.sha256(token.encode()).hexdigest(), generation)


def session_of_sha(token_sha256: str, generation: int = 0) -> str:
    """``session_value`` from the token's SHA-256 hex digest."""
    salt = b"noetl-console-session-v1" + (f":{generation}".encode() if generation else b"")
    return hmac.new(token_sha256.encode(), salt, hashlib.sha256).hexdigest()


SESSIONS_BUCKET = "noetl_sessions"


class SessionGenerations:
    """Per principal, the generation of its console sessions, in the KV bucket ``noetl_sessions``
    (shared by every replica): signing out raises it, so a copied cookie stops working at once."""

    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self._kv: Any = None

    async def _bucket(self) -> Any:
        if self._kv is None:
            self._kv = await self.bus.kv(SESSIONS_BUCKET)
        return self._kv

    @staticmethod
    def _key(name: str) -> str:
        return hashlib.sha256(name.encode()).hexdigest()[:32]

    async def get(self, name: str) -> int:
        if self.bus is None:
            return 0
        entry = await (await self._bucket()).get(self._key(name))
        return int(entry.value) if entry is not None and entry.value else 0

    async def bump(self, name: str) -> int:
        """Void every session of ``name``; returns the new generation."""
        if self.bus is None:
            return 0
        generation = await self.get(name) + 1
        await (await self._bucket()).put(self._key(name), str(generation).encode())
        return generation


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


def who_of(principal: Principal, token: str | None) -> dict[str, Any]:
    """What the request scope carries about its caller: ``{role, who, name, principal}``;
    ``who`` names the token by a hash prefix, never the token."""
    return {
        "role": principal.role,
        "who": token_id(token) if token else principal.name,
        "name": principal.name,
        "principal": principal,
    }


class BearerAuth:
    def __init__(
        self, app: Any, principals: Principals, metrics: Metrics, sessions: SessionGenerations | None = None
    ) -> None:
        self.app, self.principals, self.metrics = app, principals, metrics
        self.sessions = sessions or SessionGenerations(None)

    def identify(self, presented: str | None) -> dict[str, Any] | None:
        principal = self.principals.identify(presented)
        return None if principal is None else who_of(principal, presented)

    async def identify_session(self, cookie: str | None) -> dict[str, Any] | None:
        """A console session cookie, named like the principal it was derived from, unless that
        principal has signed out since it was issued."""
        if not self.principals.required:
            return who_of(self.principals.identify(None) or ANONYMOUS, None)
        if not cookie:
            return None
        principal = await self.principals.identify_session(cookie, self.sessions.get)
        return None if principal is None else who_of(principal, None)

    async def identify_console(self, scope: dict[str, Any]) -> dict[str, Any] | None:
        bearer = _bearer(scope)
        if bearer:
            return self.identify(bearer)
        return await self.identify_session(_cookie(scope, SESSION_COOKIE))

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
                who = await self.identify_console(scope)
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
