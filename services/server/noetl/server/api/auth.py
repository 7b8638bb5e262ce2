"""Bearer-token auth for ``/api/*``, as plain ASGI so streamed responses (SSE) pass through untouched.

Health, readiness, metrics and the OpenAPI document stay open: probes and scrapers carry no
token. The admin token is accepted wherever the user token is, and is the only one that may read
a credential's value. Tokens are compared in constant time and never logged: a caller is named
by a hash prefix of its token.
"""

from __future__ import annotations

import hmac
import json
import time
from typing import Any

from noetl.events.audit import token_id
from noetl.server.api.metrics import Metrics

PROTECTED_PREFIX = "/api/"


def _bearer(scope: dict[str, Any]) -> str | None:
    for name, value in scope.get("headers") or ():
        if name == b"authorization":
            text = value.decode("latin-1")
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
            await self.app(scope, receive, send_counted)
        finally:
            endpoint = scope.get("endpoint")
            name = getattr(endpoint, "__name__", None) or (
                "unauthorized" if status["code"] == 401 else "none"
            )
            self.metrics.observe_http(scope["method"], name, status["code"], time.perf_counter() - started)


async def _unauthorized(send: Any) -> None:
    body = json.dumps(
        {"error": {"kind": "unauthorized", "message": "send `Authorization: Bearer <token>`"}}
    ).encode()
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
