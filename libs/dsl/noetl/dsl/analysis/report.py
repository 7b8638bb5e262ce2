"""Findings of ``noetl check`` and the codes they carry.

A finding is an *error* when the construct cannot work as written in any run (a step that never
ends, a join that never admits, a jump cycle with no way out, a name that is never defined where
it is used) and a *warning* when it is probably a mistake but some run could still be correct
(an arc that never fires is dead code, not a failure), and a *hint* when it is dead code that
cannot change what a run does (a task no path reaches: the way Pyright greys out unreachable code
instead of warning). Codes are stable strings so a user can
silence one on a line with ``# noetl: ignore[code]``, the way linters are silenced.

    code                     severity   what
    unreachable-step         warning    no token can reach the step
    no-end                   error      every path from the step loops forever
    admission-never-allows   error      no ctx the playbook can write lets the step's admission allow
    arc-never-fires          warning    the arc's `when` is false on every way its step can end
    jump-cycle-unbounded     error      a jump cycle with no break, fail, retry or exit
    task-unreachable         hint       no path through the pipeline reaches the task
    task-jumped-over         hint       every path jumps past the task
    name-out-of-scope        error      a namespace used where it is never defined (`iter`, `outcome`, ...)
    unknown-name             error      a name that is no namespace and no task label of the pipeline
    ctx-unwritten            warning    a ctx key read on a path where nothing wrote it
    args-missing             warning    an args key that an incoming arc does not provide
    ctx-race-if-parallel     warning    a sequential loop's set_ctx on a key without a reducer
    await-in-fan-out         hint       a step awaiting a signal that several tokens can reach at once
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

Severity = Literal["error", "warning", "hint"]

CODES: dict[str, Severity] = {
    "unreachable-step": "warning",
    "no-end": "error",
    "admission-never-allows": "error",
    "arc-never-fires": "warning",
    "jump-cycle-unbounded": "error",
    "task-unreachable": "hint",
    "task-jumped-over": "hint",
    "name-out-of-scope": "error",
    "unknown-name": "error",
    "ctx-unwritten": "warning",
    "args-missing": "warning",
    # correct as written, but a later switch to parallel would race (issue 18 asks for a warning;
    # warnings fail `noetl check` only with --strict)
    "ctx-race-if-parallel": "warning",
    "await-in-fan-out": "hint",  # correct as written: each token takes a signal of its own
}

_IGNORE = re.compile(r"#\s*noetl:\s*ignore(?:\[([\w\-, ]+)\])?")


@dataclass(frozen=True)
class Finding:
    code: str
    file: str
    line: int
    path: str
    message: str
    severity: Severity = "warning"

    def __str__(self) -> str:
        return (
            f"{self.file}:{self.line}: {self.severity}[{self.code}]: {self.path or '<root>'}: {self.message}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "code": self.code,
            "severity": self.severity,
            "file": self.file,
            "line": self.line,
            "path": self.path,
            "message": self.message,
        }


def finding(code: str, file: str, line: int, path: str, message: str, *, guarded: bool = False) -> Finding:
    """A finding with the code's severity; ``guarded`` downgrades an error to a warning (the
    template protects the use with `default` or `is defined`, so it cannot fail a run)."""
    severity = CODES[code]
    if guarded:
        severity = "warning"
    return Finding(code, file, line, path, message, severity)


def ignored_codes(source: str) -> dict[int, set[str] | None]:
    """Line → codes silenced on it by a ``# noetl: ignore[...]`` comment (None: every code)."""
    out: dict[int, set[str] | None] = {}
    for n, text in enumerate(source.splitlines(), start=1):
        m = _IGNORE.search(text)
        if m:
            out[n] = {c.strip() for c in m.group(1).split(",")} if m.group(1) else None
    return out


def settle(findings: list[Finding], source: str) -> list[Finding]:
    """Drop silenced and duplicate findings; sort by line, errors first on a line."""
    silenced = ignored_codes(source)
    seen: set[tuple[str, str, str]] = set()
    out: list[Finding] = []
    for f in findings:
        codes = silenced.get(f.line, set())
        if codes is None or f.code in codes:
            continue
        key = (f.code, f.path, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    return sorted(out, key=lambda f: (f.line, f.severity != "error", f.path))
