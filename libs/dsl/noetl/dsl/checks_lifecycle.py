"""Checks of a step's `spec.lifecycle` (timeouts, deadlines, `await` of a signal and who may send
it), used by ``noetl.dsl.checks_step``."""

from __future__ import annotations

from typing import Any

from noetl.dsl.closed import check_closed, did_you_mean
from noetl.dsl.names import signal_name_problem
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.yamlload import Path

LIFECYCLE_KEYS = ("timeout_s", "deadline_s", "await")


AWAIT_KEYS = ("signal", "timeout_s", "by")


AWAIT_BY_KEYS = ("roles", "namespaces")


AWAIT_ROLES = ("admin", "operator", "viewer")


def _meant(key: Any, allowed: tuple[str, ...]) -> str:
    meant = did_you_mean(key, allowed)
    return f"did you mean `{meant}`? " if meant is not None else ""


def _positive_seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def check_lifecycle(lc: Any, path: Path, r: Report) -> None:
    """``lifecycle`` (SEMANTICS §16, §17): time limits counted by the server, an awaited signal."""
    if not isinstance(lc, dict):
        r.add(path, f"`lifecycle` is a mapping ({', '.join(LIFECYCLE_KEYS)}), found {type_name(lc)}")
        return
    for key, value in lc.items():
        if key not in LIFECYCLE_KEYS:
            r.add(
                (*path, key),
                f"unknown key {describe(key)} in `lifecycle`: {_meant(key, LIFECYCLE_KEYS)}"
                f"it has {', '.join(LIFECYCLE_KEYS)}",
            )
        elif key != "await" and value is not None and not _positive_seconds(value):
            r.add((*path, key), f"`{key}` is a number of seconds (above 0), found {describe(value)}")
    wait = lc.get("await")
    if wait is None:
        return
    wpath = (*path, "await")
    if not isinstance(wait, dict):
        r.add(wpath, f"`await` is `{{signal: NAME, timeout_s: N}}`, found {type_name(wait)}")
        return
    check_closed(wait, wpath, AWAIT_KEYS, "`await`", r, elsewhere=False)
    if "signal" not in wait:
        r.add(wpath, "`await` needs `signal: NAME`, the signal the step waits for (`noetl signal ID NAME`)")
    elif problem := signal_name_problem(wait["signal"]):
        r.add((*wpath, "signal"), problem)
    timeout = wait.get("timeout_s")
    if timeout is not None and not _positive_seconds(timeout):
        r.add(
            (*wpath, "timeout_s"), f"`timeout_s` is a number of seconds (above 0), found {describe(timeout)}"
        )
    _check_await_by(wait.get("by"), (*wpath, "by"), r)


def _check_await_by(by: Any, path: Path, r: Report) -> None:
    """``by: {roles: [...], namespaces: [...]}``: who may answer the signal (either may be left out)."""
    if by is None:
        return
    if not isinstance(by, dict):
        r.add(path, f"`by` is `{{roles: [operator], namespaces: [finance]}}`, found {type_name(by)}")
        return
    for key, value in by.items():
        if key not in AWAIT_BY_KEYS:
            r.add((*path, key), f"unknown key {describe(key)} in `by`: it has {', '.join(AWAIT_BY_KEYS)}")
        elif not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            r.add((*path, key), f"`{key}` is a list of names, found {describe(value)}")
        elif key == "roles" and (bad := [v for v in value if v not in AWAIT_ROLES]):
            r.add((*path, key), f"roles are {', '.join(AWAIT_ROLES)}; found {', '.join(bad)}")
