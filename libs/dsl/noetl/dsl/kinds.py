"""The registry of task kinds that validation accepts.

Validation must reject unknown kinds without importing the worker (the DSL library does no I/O
and has no heavy dependencies), so the names live here; the worker registers the executor of
each kind under the same name, and a test checks that the two lists agree.
"""

from __future__ import annotations

BUILTIN_KINDS: frozenset[str] = frozenset(
    {"noop", "python", "http", "postgres", "duckdb", "playbook", "workbook", "secrets"}
)

_extra: set[str] = set()


def register_kind(name: str) -> None:
    """Let a plug-in kind pass validation (call it before validating)."""
    _extra.add(name)


def known_kinds() -> frozenset[str]:
    return BUILTIN_KINDS | frozenset(_extra)
