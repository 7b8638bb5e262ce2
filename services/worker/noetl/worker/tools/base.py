"""The contract every tool kind implements, and the registry the worker looks kinds up in.

A kind receives the task's fields already rendered (templates resolved against the pipeline
context) and returns exactly one outcome mapping (SEMANTICS.md §6). It never raises for a
domain failure: an HTTP 503, a SQL error or a Python exception is an ``error`` outcome the task
policy can route. Only a bug in the kind itself escapes as an exception (the pipeline turns it
into a ``tool_error`` outcome).
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from noetl.dsl.errors import NoetlError
from noetl.events.clock import utc_now


@dataclass
class ToolContext:
    """What a kind may use besides its own fields."""

    execution_id: str
    step: str
    task: str
    spec: Mapping[str, Any]  # effective task spec (kind defaults → executor → step → loop → task)
    keychain: Mapping[str, Any]  # resolved credentials by name: {name: data}
    services: Any = None  # worker-wide shared resources (http client, pools, NATS)
    attempt: int = 1
    extra: dict[str, Any] = field(default_factory=dict)


class Tool(Protocol):
    kind: str

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """Return one outcome: ``{status: ok|error, result?, error?, http?|pg?|py?}``."""
        ...


def ok(result: Any, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "ok", "result": result}
    out.update(extra)
    return out


def error(err: NoetlError | dict[str, Any], **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"status": "error", "error": err.to_dict() if isinstance(err, NoetlError) else err}
    out.update(extra)
    return out


def timeout_seconds(
    spec: Mapping[str, Any], default: float | None = None
) -> tuple[float | None, float | None]:
    """``spec.timeout`` as ``(connect, read)``: one number sets both, a mapping sets each."""
    t = spec.get("timeout")
    if t is None:
        return default, default
    if isinstance(t, Mapping):
        c, r = t.get("connect", default), t.get("read", default)
        return (float(c) if c is not None else None), (float(r) if r is not None else None)
    return float(t), float(t)


class Clock:
    """Outcome meta timing; kept out of the kinds so they stay easy to test."""

    def __init__(self) -> None:
        self.started_at = utc_now()
        self._t0 = time.perf_counter()

    def meta(self, task: str, attempt: int, trace_id: str | None = None) -> dict[str, Any]:
        """``outcome.meta`` (spec 000 §6: duration, attempt, timestamps, trace ids): what a rule
        or a reader of the log needs to place a task run in time and in its trace."""
        out: dict[str, Any] = {
            "attempt": attempt,
            "duration_ms": round((time.perf_counter() - self._t0) * 1000, 3),
            "started_at": self.started_at,
            "ended_at": utc_now(),
            "task": task,
        }
        if trace_id:
            out["trace_id"] = trace_id
        return out


_REGISTRY: dict[str, Tool] = {}


def register(tool: Tool) -> Tool:
    _REGISTRY[tool.kind] = tool
    return tool


_LAZY: dict[str, str] = {}


def register_lazy(kind: str, module: str) -> None:
    """Name the module that registers ``kind``; it is imported when the kind is first used."""
    _LAZY[kind] = module


_EXTRAS = {"asyncpg": "postgres", "duckdb": "duckdb"}


def get_tool(kind: str) -> Tool:
    tool = _REGISTRY.get(kind)
    if tool is None and kind in _LAZY:
        try:
            importlib.import_module(_LAZY[kind])
        except ModuleNotFoundError as e:
            extra = _EXTRAS.get(e.name or "")
            if extra is None:
                raise
            # asyncpg and duckdb are extras: a worker pool that runs neither installs neither
            from noetl.dsl.errors import ToolError

            raise ToolError(
                f"kind: {kind} needs the {e.name} package, not installed on this worker: "
                f"pip install 'noetl-jetstream[{extra}]' (or run the task on a pool whose image has it)"
            ) from None
        tool = _REGISTRY.get(kind)
    if tool is None:
        raise KeyError(kind)
    return tool


def registered_kinds() -> frozenset[str]:
    return frozenset(_REGISTRY) | frozenset(_LAZY)
