"""The settings as people read them: the table of docs/operations.md and the ``--help`` epilog,
both generated from the ``Settings`` model so they cannot drift from it."""

from __future__ import annotations

import sys
from pathlib import Path

from noetl.events.settings import USED_BY, Settings, variable
from noetl.events.settings_values import _UNITS


def markdown_table() -> str:
    """The table of docs/operations.md: variable, default, meaning."""
    rows = ["| variable | default | used by | meaning |", "|---|---|---|---|"]
    for name, info in Settings.model_fields.items():
        default = info.default
        if default is None:
            shown = "unset"
        elif name in ("events_max_age", "lease_ttl", "stall_after_s", "ack_wait"):
            shown = _duration_text(float(default))
        elif name == "events_max_bytes":
            shown = "-1"
        else:
            shown = str(default).lower() if isinstance(default, bool) else str(default)
        desc = (info.description or "").replace("|", "\\|")
        rows.append(f"| `{variable(name)}` | `{shown}` | {USED_BY.get(name, 'all')} | {desc} |")
    return "\n".join(rows) + "\n"


def _duration_text(seconds: float) -> str:
    for unit in ("w", "d", "h", "m"):
        if seconds >= _UNITS[unit] and seconds % _UNITS[unit] == 0:
            return f"{int(seconds // _UNITS[unit])}{unit}"
    return f"{seconds:g}s"


def help_text() -> str:
    """The settings for ``--help``: each variable with its default, one line each."""
    lines = ["settings (environment, or a file named by NOETL_CONFIG / --config; flags win):"]
    for name, info in Settings.model_fields.items():
        d = info.default
        shown = "" if d is None else f" [{_duration_text(float(d)) if name in _DURATIONS else d}]"
        lines.append(f"  {variable(name):26} {(info.description or '').replace('`', '')}{shown}")
    return "\n".join(lines)


_DURATIONS = ("events_max_age", "lease_ttl", "stall_after_s", "ack_wait")


def write_table(path: str) -> bool:
    """Put ``markdown_table()`` between the markers of ``path``; True when it changed."""
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    doc = Path(path).read_text()
    head, rest = doc.split(begin, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{begin}{markdown_table()}{end}{tail}"
    Path(path).write_text(new)
    return new != doc


def main() -> None:
    """``python -m noetl.events.settings [--write FILE]``: print the table, or rewrite it in FILE."""
    if sys.argv[1:2] == ["--write"]:
        print("updated" if write_table(sys.argv[2]) else "unchanged")
    else:
        print(markdown_table(), end="")
