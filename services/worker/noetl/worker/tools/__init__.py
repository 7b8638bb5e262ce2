"""The built-in task kinds, registered by name and imported on first use.

A kind's module is imported the first time a task of that kind runs, so a worker (and
`noetl run`) does not pay for DuckDB, asyncpg or httpx before a playbook needs them: a one-step
noop run starts ~150 ms sooner. Plug-in kinds call :func:`register` directly.
"""

from __future__ import annotations

import sys

from noetl.worker.tools.base import ToolContext, get_tool, register, register_lazy, registered_kinds

__all__ = ["ToolContext", "close_all", "get_tool", "register", "register_lazy", "registered_kinds"]

for _kind in ("noop", "python", "http", "postgres", "duckdb", "secrets", "playbook", "script"):
    register_lazy(_kind, f"noetl.worker.tools.{_kind}")


async def close_all() -> None:
    """Release the worker-wide resources of the kinds that were used: the HTTP client, PostgreSQL
    pools and DuckDB files. Each is closed even when another fails."""
    errors: list[BaseException] = []
    for name in ("http", "postgres"):
        module = sys.modules.get(f"noetl.worker.tools.{name}")
        if module is not None:
            try:
                await module.aclose()
            except Exception as exc:
                errors.append(exc)
    duck = sys.modules.get("noetl.worker.tools.duckdb")
    if duck is not None:
        try:
            duck.close()
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]
