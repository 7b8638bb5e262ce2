"""Comparing an execution's `--json` output with an expectation file (`NAME.expect.yaml`).

The keys and their meaning are the conformance suite's (shared/conformance/README.md): `status`,
`result`, `ctx` (contained), `ctx_absent`, `steps`, `steps_absent`, `events_include`,
`events_exclude`, `event_count`, `error`, `error_message_contains`, `output_contains`,
`secret_absent`, `exit`. The mock-API keys (`api_calls`, `records`, `api_in_flight`) need the
conformance runner's API and are reported as not checked.
"""

from __future__ import annotations

import json
from typing import Any

NOT_CHECKED = ("api_calls", "records", "api_in_flight")


def same(a: Any, b: Any) -> bool:
    """Equal and of the same JSON type: true is not 1, 4 is not 4.0."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def contained(want: Any, got: Any, path: str) -> list[str]:
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path}: expected a mapping, got {got!r}"]
        out: list[str] = []
        for k, v in want.items():
            out += [f"{path}.{k}: missing"] if k not in got else contained(v, got[k], f"{path}.{k}")
        return out
    return [] if same(want, got) else [f"{path}: expected {want!r}, got {got!r}"]


def compare(exp: dict[str, Any], out: dict[str, Any]) -> list[str]:
    """Every way ``out`` differs from ``exp`` (empty when it meets it)."""
    problems: list[str] = []
    want_status = exp.get("status", "success" if exp.get("exit", 0) == 0 else "failed")
    if out.get("status") != want_status:
        problems.append(f"status {out.get('status')!r}, expected {want_status!r}")
    if "ctx" in exp:
        problems += contained(exp["ctx"], out.get("ctx"), "ctx")
    if "error" in exp:
        problems += contained(exp["error"], out.get("error"), "error")
    for needle in exp.get("error_message_contains") or []:
        if needle not in str((out.get("error") or {}).get("message", "")):
            problems.append(f"error message lacks {needle!r}")
    for key in exp.get("ctx_absent") or []:
        if key in (out.get("ctx") or {}):
            problems.append(f"ctx.{key} is set, expected it not to be")
    text = json.dumps(out, default=str)
    for needle in exp.get("output_contains") or []:
        if needle not in text:
            problems.append(f"output lacks {needle!r}")
    secret = exp.get("secret_absent")
    if secret and secret in text:
        problems.append("a keychain secret appears in the output or the events")
    if "result" in exp and not same(out.get("result"), exp["result"]):
        problems.append(f"result {out.get('result')!r}, expected {exp['result']!r}")
    steps = out.get("steps") or {}
    for step, statuses in (exp.get("steps") or {}).items():
        got = [r.get("status") for r in steps.get(step) or []]
        if got != statuses:
            problems.append(f"step {step}: runs {got}, expected {statuses}")
    for step in exp.get("steps_absent") or []:
        if steps.get(step):
            problems.append(f"step {step} ran, expected it not to")
    names = [e.get("name") for e in out.get("events") or []]
    for name in exp.get("events_include") or []:
        if name not in names:
            problems.append(f"no {name} event")
    for name in exp.get("events_exclude") or []:
        if name in names:
            problems.append(f"unexpected {name} event")
    for name, count in (exp.get("event_count") or {}).items():
        if names.count(name) != count:
            problems.append(f"{names.count(name)} {name} events, expected {count}")
    return problems
