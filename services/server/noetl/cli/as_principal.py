"""The CLI as a principal: with ``NOETL_TOKEN`` set, the commands that act on one execution
(``exec``, ``status``, ``cancel``, ``signal``, ``pause``, ``resume``) go through the NATS service
``noetl.api.*`` with that token, instead of the streams and buckets themselves.

A principal's NATS user reaches only that service (docs/security.md#nats), which checks the
token's role and namespaces like the HTTP API: so the CLI run by ``alice`` can do what ``alice``
may, no more, whatever the NATS server would otherwise let a client do.
"""

from __future__ import annotations

import json
from typing import Any

from noetl.dsl.errors import RequestInvalidError, reply_error

TOKEN_ENV = "NOETL_TOKEN"


def principal_token() -> str | None:
    """The token the CLI acts with, or None (then it acts as its NATS user, on NATS directly)."""
    from noetl.events.settings import setting

    token = setting("token")
    return token.get_secret_value() or None if token is not None else None


async def call_service(
    nc: Any, subject: str, body: dict[str, Any], timeout: float = 30.0
) -> dict[str, Any]:
    """One request to the NATS service with the principal's token; its JSON answer, an error
    answer included (``{"error": {kind, message}}``)."""
    headers = {"Authorization": f"Bearer {principal_token()}"}
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=timeout, headers=headers)
    try:
        out = json.loads(msg.data or b"{}")
    except ValueError:
        return reply_error(RequestInvalidError(f"{subject} answered no JSON"))
    if not isinstance(out, dict):
        return reply_error(RequestInvalidError(f"{subject} answered no JSON object"))
    return out


def service_error(out: dict[str, Any]) -> dict[str, Any] | None:
    """The refusal in a service answer, or None: an execution's own ``error`` (a status answer
    has ``status`` beside it) is no refusal."""
    err = out.get("error")
    return err if isinstance(err, dict) and "status" not in out else None
