"""The problem collector every validation check writes to.

Checks never raise and never stop early: each one adds what it finds here, so ``noetl validate``
shows every problem of a file at once, with its line, in file order.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.errors import Problem
from noetl.dsl.yamlload import LineMap, Path, fmt_path


class Report:
    def __init__(self, file: str, lines: LineMap) -> None:
        self.file = file
        self.lines = lines
        self._problems: list[Problem] = []
        self._seen: set[tuple[str, str]] = set()
        self._paths: set[str] = set()

    def add(self, path: Path, message: str) -> None:
        shown = fmt_path(path)
        if (shown, message) in self._seen:
            return
        self._seen.add((shown, message))
        self._paths.add(shown)
        self._problems.append(Problem(self.file, self.lines.line(path), shown, message))

    def has(self, path: Path) -> bool:
        """Whether a problem was reported at ``path``: a later, more general check (an unknown
        key) stays quiet where a specific one (a misplaced knob) already spoke."""
        return fmt_path(path) in self._paths

    def __bool__(self) -> bool:
        return bool(self._problems)

    def problems(self) -> list[Problem]:
        """In file order (stable, so problems on one line keep the order they were found in)."""
        return sorted(self._problems, key=lambda p: p.line)


def describe(value: Any) -> str:
    """A short, safe rendering of a user value for a message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__
