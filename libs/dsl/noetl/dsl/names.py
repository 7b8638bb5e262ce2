"""Names that become a NATS subject token or a KV key, checked where they enter.

A pool name is a token of ``noetl.commands.<pool>``, an execution id a token of
``noetl.events.<p>.<execution_id>.…`` and part of KV keys. A space, a dot, ``*`` or ``>`` in one
makes a subject that NATS refuses (the publish can never succeed) or, worse, a wildcard that
matches other executions' messages. So they are refused with a clear message at the door
(validation, the request), never met at publish time.
"""

from __future__ import annotations

import re

_POOL = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EXECUTION_ID = re.compile(r"[0-9a-f]{32}")
MAX_REQUEST_ID = 256


def pool_problem(pool: object) -> str | None:
    """Why ``pool`` cannot name a worker pool, or None."""
    if isinstance(pool, str) and _POOL.fullmatch(pool):
        return None
    return (
        f"pool {pool!r} is not a valid pool name: use 1 to 64 letters, digits, '-' or '_' "
        "(it becomes the subject noetl.commands.<pool>)"
    )


def execution_id_problem(execution_id: object) -> str | None:
    if isinstance(execution_id, str) and _EXECUTION_ID.fullmatch(execution_id):
        return None
    return (
        f"execution_id {execution_id!r} is not 32 lowercase hex digits; leave it out and the server "
        "derives one from request_id"
    )


def request_id_problem(request_id: object) -> str | None:
    if isinstance(request_id, str) and 0 < len(request_id) <= MAX_REQUEST_ID and request_id.isprintable():
        return None
    return f"request_id must be a printable string of 1 to {MAX_REQUEST_ID} characters"


_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def signal_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a signal (``lifecycle.await.signal``, ``noetl signal``), or None:
    it is a URL path segment and a NATS header value, so it is kept to one plain token."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return f"signal name {name!r} is not valid: use 1 to 64 letters, digits, '-' or '_' (e.g. approval)"


def schedule_name_problem(name: object) -> str | None:
    """Why ``name`` cannot name a schedule, or None: it is a token of ``noetl.timers.cron.<name>``
    and a key of the ``noetl_schedules`` bucket."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return (
        f"schedule name {name!r} is not valid: use 1 to 64 letters, digits, '-' or '_' (it becomes the "
        "subject noetl.timers.cron.<name>)"
    )
