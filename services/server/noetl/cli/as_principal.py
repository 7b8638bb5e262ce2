"""The CLI as a principal: with ``NOETL_TOKEN`` set, the commands that act on one execution
and every command that reads or writes the control plane's state (``exec``, ``status``, ``cancel``,
``signal``, ``pause``, ``resume``, ``rerun``, ``schedule``, ``catalog``, ``events``, ``logs``,
``executions``, ``credentials``) go through the NATS service ``noetl.api.*`` with that token,
instead of the streams and buckets themselves.

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


def refusal_exit(out: dict[str, Any]) -> int | None:
    """The exit code for a refused service answer, after saying why on stderr; None when it was
    answered: 1 for what is not there (or not the caller's to see), 2 for any other refusal."""
    import sys

    refused = service_error(out)
    if refused is None:
        return None
    print(f"noetl: {refused.get('message')} ({refused.get('kind')})", file=sys.stderr)
    return 1 if refused.get("kind") == "not_found" else 2


async def events_of(nc: Any, execution_id: str, *, follow: bool, poll: float = 0.5) -> Any:
    """An execution's events through ``noetl.api.events``, page after page; with ``follow``,
    asking again every ``poll`` seconds until ``playbook.processed``. Yields a refusal answer
    (``{"error": ...}``) once and stops when the service refuses."""
    import asyncio

    after = 0
    while True:
        out = await call_service(nc, "noetl.api.events", {"execution_id": execution_id, "after": after})
        if service_error(out) is not None:
            yield out
            return
        for ev in out.get("events") or []:
            yield ev
            if follow and ev.get("name") == "playbook.processed":
                return
        after = int(out.get("last") or after)
        if out.get("more"):
            continue
        if not follow:
            return
        await asyncio.sleep(poll)
