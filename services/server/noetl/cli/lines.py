"""One readable line per event (``noetl events``) and per line of task output (``noetl logs``).

A person scanning an execution wants the time, where in the playbook (step, loop iteration,
task), what happened and, when it went wrong, the error's kind and message on the same line.
Task events name their task, not their step, so the formatter feeds the read-side projection
the events seen so far (:class:`noetl.client.activity.Activity`) and asks it which step and
iteration they belong to; each line renders the event itself.
"""

from __future__ import annotations

import json
import re
from typing import Any

from noetl.client.activity import Activity
from noetl.events.vocabulary import EventName

_TIME = re.compile(r"T(\d\d:\d\d:\d\d)(\.\d{1,3})?")
MAX_MESSAGE = 240


def short_time(timestamp: Any) -> str:
    """``12:03:04.123`` of an RFC 3339 timestamp; the date is the same for nearly every event
    of an execution, and ``--json`` keeps the whole value."""
    if not isinstance(timestamp, str):
        return "?"
    m = _TIME.search(timestamp)
    if m is None:
        return timestamp
    return m.group(1) + (m.group(2) or ".000").ljust(4, "0")


def one_line(text: Any, limit: int = MAX_MESSAGE) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 3] + "..."


def error_text(error: Any) -> str:
    if not isinstance(error, dict) or not error:
        return ""
    return f"{error.get('kind', 'error')}: {one_line(error.get('message', ''))}"


def where(step: str | None, index: int | None = None, task: str | None = None) -> str:
    out = step or "?"
    if index is not None:
        out += f"[{index}]"
    if task:
        out += f".{task}"
    return out


def _duration(outcome: dict[str, Any]) -> str:
    ms = (outcome.get("meta") or {}).get("duration_ms")
    if not isinstance(ms, int | float):
        return ""
    return f"{ms:.0f} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"


def _detail(ev: dict[str, Any], p: dict[str, Any]) -> str:
    name: EventName | None = ev.get("name")  # so each name compared below is checked
    if name == "task.started":
        attempt = p.get("attempt")
        again = isinstance(attempt, int) and attempt > 1
        return f"{p.get('kind', '')}" + (f", attempt {attempt}" if again else "")
    if name == "task.done":
        outcome = raw if isinstance(raw := p.get("outcome"), dict) else {}
        parts = [_duration(outcome), error_text(outcome.get("error"))]
        if "output" in p:
            out = p["output"]
            parts.append(
                f"output: {out.count(chr(10)) or 1} line(s)" if isinstance(out, str) else "output: stored"
            )
        return "  ".join(x for x in parts if x)
    if name == "loop.started":
        return f"{p.get('total')} iterations ({p.get('mode', 'sequential')})"
    if name in ("loop.done", "step.failed") and isinstance(p.get("total"), int):
        counts = f"{p.get('done', 0)} done, {p.get('failed', 0)} failed of {p['total']}"
        return "  ".join(x for x in (counts, error_text(p.get("error"))) if x)
    if name == "next.evaluated":
        fired = [f.get("step") for f in p.get("fired") or [] if isinstance(f, dict)]
        return "-> " + (", ".join(str(f) for f in fired) if fired else "(nothing fired)")
    if name == "workflow.finished":
        return "  ".join(x for x in (str(p.get("status", "")), error_text(p.get("error"))) if x)
    return error_text(p.get("error"))


class EventLines:
    """Formats an execution's events in log order, one line each."""

    def __init__(self) -> None:
        self.activity = Activity()

    def line(self, ev: dict[str, Any]) -> str:
        self.activity.feed(ev)
        p = raw if isinstance(raw := ev.get("payload"), dict) else {}
        assert isinstance(p, dict)
        kind = ev.get("entity_type")
        if kind in ("step", "loop", "next"):
            at = where(str(ev.get("entity_id", "")), self.activity.index_of(ev))
        elif kind == "task":
            at = where(self.activity.step_of(ev), self.activity.index_of(ev), str(ev.get("entity_id", "")))
        elif kind == "playbook":
            at = str(p.get("path") or "") if ev.get("name") == "playbook.execution.requested" else ""
        else:
            at = ""
        time, name, status = short_time(ev.get("timestamp")), ev.get("name", ""), ev.get("status", "")
        return f"{time}  {name:<22} {at:<24} {status:<11} {_detail(ev, p)}".rstrip()


def output_lines(entry: dict[str, Any]) -> list[str]:
    """A task run's output as ``step[i].task | line`` lines (an ``attempt`` after the first is
    named too): greppable, and clear about whose output each line is."""
    prefix = where(entry.get("step"), entry.get("index"), entry.get("task"))
    attempt = entry.get("attempt")
    if isinstance(attempt, int) and attempt > 1:
        prefix += f" (attempt {attempt})"
    text = entry.get("output")
    if not isinstance(text, str):
        text = json.dumps(text, default=str)
    return [f"{prefix} | {line}" for line in text.rstrip("\n").split("\n")]
