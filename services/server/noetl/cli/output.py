"""What the terminal shows of an execution: its summary and where a failure points in the file."""

from __future__ import annotations

import json
import re
from typing import Any

from noetl.client.view import execution_output

__all__ = ["error_line", "execution_output", "loop_counts", "summary"]

_PATH_SEGMENT = re.compile(r'\.?([\w-]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


def _parse_path(path: str) -> tuple[str | int, ...] | None:
    """``workflow[2].tool[0]["x-y"]`` back into its segments (the inverse of ``fmt_path``)."""
    out: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _PATH_SEGMENT.match(path, pos)
        if match is None or match.end() == pos:
            return None
        name, index, quoted = match.groups()
        out.append(int(index) if index is not None else json.loads(quoted) if quoted else name)
        pos = match.end()
    return tuple(out)


def error_line(error: dict[str, Any], text: str | None) -> int | None:
    """The line of the playbook an execution's error points at: the line a python task's failing
    statement is on, or else the line of the construct its ``path`` names (a template error).
    Why: ``FILE:LINE`` is what a terminal or an editor turns into a jump to the cause."""
    line = error.get("playbook_line")
    if isinstance(line, int) and line > 0:
        return line
    path = error.get("path")
    if not isinstance(path, str) or not path or text is None:
        return None
    segments = _parse_path(path)
    if segments is None:
        return None
    from noetl.dsl.sugar import load_compiled

    loaded = load_compiled(text)
    return loaded.lines.line(segments) if loaded.data is not None else None


def loop_counts(counts: dict[str, Any]) -> str:
    """``12 done, 1 failed of 30, 4 in flight``: how far a loop run is."""
    text = f"{counts.get('done', 0)} done, {counts.get('failed', 0)} failed of {counts.get('total', '?')}"
    if counts.get("in_flight"):
        text += f", {counts['in_flight']} in flight"
    return text


def summary(out: dict[str, Any], file: str | None = None, text: str | None = None) -> str:
    """What a person reads: the status, each step's runs and the error or the result. ``file``
    and ``text`` are the playbook the execution ran, when the caller has it (``noetl run FILE``):
    the error then also names ``FILE:LINE``; without them a python error names the line of the
    execution's catalog playbook."""
    lines = [f"execution {out['execution_id']}: {out['status']}"]
    loops = out.get("loops") or {}  # `noetl status`: counters of each loop run
    for step, runs in out["steps"].items():
        lines.append(f"  {step}: {', '.join(r['status'] for r in runs)}")
        for n, counts in enumerate(loops.get(step) or [], 1):
            lines.append(f"    {'loop' if len(loops[step]) == 1 else f'loop run {n}'}: {loop_counts(counts)}")
    if out.get("paused"):  # `noetl status`: what a running execution waits for (SEMANTICS §17)
        lines.append("  paused: nothing new is scheduled until `noetl resume`")
    for w in out.get("waiting") or ():
        limit = f", at most {w['timeout_s']} s" if w.get("timeout_s") else ""
        lines.append(
            f"  waiting: step {w['step']} for signal {w['signal']!r} since {w['since']}{limit} "
            f"(`noetl signal {out['execution_id']} {w['signal']} --data JSON`)"
        )
    stalled = out.get("stalled")  # `noetl status`: no event for a while, waiting for nothing declared
    if stalled:
        lines.append(f"  {stalled['state']}: no event for {stalled['idle_s']:.0f} s: {stalled['reason']}")
    err = out.get("error")
    if err:
        lines.append(f"error: {err.get('kind')}: {err.get('message')}")
        line = error_line(err, text) if file else err.get("playbook_line")
        if file and line:
            lines.append(f"  at {file}:{line}")
        elif isinstance(line, int) and out.get("path"):
            version = f" version {out['version']}" if out.get("version") else ""
            lines.append(f"  at line {line} of playbook {out['path']}{version}")
    else:
        lines.append(f"result: {json.dumps(out.get('result'), default=str)[:2000]}")
    return "\n".join(lines)
