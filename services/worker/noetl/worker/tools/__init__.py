"""The built-in task kinds; importing this package registers them.

``playbook`` needs the worker's NATS connection and registers itself the same way from
:mod:`noetl.worker.tools.playbook`.
"""

from __future__ import annotations

from noetl.worker.tools import duckdb, http, noop, playbook, postgres, python, secrets
from noetl.worker.tools.base import ToolContext, get_tool, register, registered_kinds

__all__ = ["ToolContext", "close_all", "duckdb", "get_tool", "http", "noop", "playbook", "postgres",
           "python", "register", "registered_kinds", "secrets"]


async def close_all() -> None:
    """Release the worker-wide resources of the kinds: the HTTP client, PostgreSQL pools and
    DuckDB files. Each is closed even when another fails."""
    errors: list[BaseException] = []
    for close in (http.aclose, postgres.aclose):
        try:
            await close()
        except Exception as exc:
            errors.append(exc)
    try:
        duckdb.close()
    except Exception as exc:
        errors.append(exc)
    if errors:
        raise errors[0]
