"""Building a ToolContext for a kind under test."""

from __future__ import annotations

from typing import Any

from noetl.worker.tools.base import ToolContext


def make_ctx(
    spec: dict[str, Any] | None = None,
    keychain: dict[str, Any] | None = None,
    prev: Any = None,
    services: Any = None,
) -> ToolContext:
    return ToolContext(
        execution_id="e1",
        step="start",
        task="t",
        spec=spec or {},
        keychain=keychain or {},
        services=services,
        extra={"prev": prev},
    )
