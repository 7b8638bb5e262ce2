"""Writing the migrated document back as YAML, with the source's comments where they belong.

Block style throughout, except containers written in flow style in the source (or marked so by
the migration) that still fit on a line. Multi-line strings become literal blocks, strings that
would not read back as the same string are double-quoted.

Comments are placed in two passes: the first lists the entries the output will have, each with
the source path it came from; every comment then goes to the entry its anchor became, or the
nearest enclosing one, or (when its construct is gone) the entry that follows it in the source.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

from noetl.dsl.migrate.source import END, Source
from noetl.dsl.yamlload import Path, _Loader

WIDTH = 110
_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")
_FLOW_UNSAFE = set(",[]{}")


def _plain(text: str, flow: bool) -> bool:
    if (
        not text
        or text != text.strip()
        or (text[0] in _INDICATORS and not (text[0] == "-" and text[1:2].isalnum()))
    ):
        return False
    if any(c in text for c in "\n\t\r") or ": " in text or " #" in text or text.endswith(":"):
        return False
    if "{{" in text or "{%" in text:  # templates read better quoted, as the specs write them
        return False
    if flow and any(c in _FLOW_UNSAFE for c in text):
        return False
    try:
        return bool(yaml.load(text, Loader=_Loader) == text)
    except yaml.YAMLError:
        return False


def scalar(value: Any, flow: bool = False) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    text = str(value)
    return text if _plain(text, flow) else json.dumps(text, ensure_ascii=False)


def _block_ok(text: str) -> bool:
    return "\n" in text and all(c.isprintable() or c in "\n\t" for c in text) and "\r" not in text


def _block(text: str, indent: int) -> list[str]:
    if not text.endswith("\n"):
        chomp, body = "-", text
    elif text.endswith("\n\n"):
        chomp, body = "+", text[:-1]
    else:
        chomp, body = "", text[:-1]
    lines = body.split("\n")
    first = next((ln for ln in lines if ln.strip()), "")
    head = "|" + ("2" if first.startswith(" ") else "") + chomp
    return [head] + [(" " * indent + ln) if ln else "" for ln in lines]


class Emitter:
    def __init__(self, src: Source) -> None:
        self.src = src
        self.o = src.origins
        self.slots: list[Path] = []
        self.plan: dict[Path, list[str]] | None = None
        self.trail: dict[Path, str] = {}
        self.done: set[Path] = set()

    # -- the plan ----------------------------------------------------------------------------

    def _assign(self) -> None:
        slots = [s for s in self.slots if s is not None]
        known = set(slots)
        plan: dict[Path, list[tuple[int, str]]] = {}
        ordered = sorted((self.src.lines.get(s, 0), s) for s in slots)

        def home(anchor: Path, line: int) -> Path | None:
            moved = [s for s in slots if s[: len(anchor)] == anchor]
            if moved:  # the construct was rewritten: its first surviving part
                return moved[0]
            for n in range(len(anchor), 0, -1):
                if anchor[:n] in known:
                    return anchor[:n]
            after = [s for ln, s in ordered if ln >= line]
            return after[0] if after else None

        for anchor, comments in self.src.before.items():
            if anchor == END:
                continue
            where = home(anchor, comments[0][0])
            if where is None:
                plan.setdefault(END, []).extend(comments)
            else:
                plan.setdefault(where, []).extend(comments)
        for anchor, (line, comment) in self.src.after.items():
            if anchor in known:
                self.trail[anchor] = comment
            else:
                where = home(anchor, line)
                plan.setdefault(where if where is not None else END, []).append((line, comment))
        plan.setdefault(END, []).extend(self.src.before.get(END, []))
        self.plan = {k: [c for _, c in sorted(v)] for k, v in plan.items()}

    def document(self, data: Any) -> str:
        self.slots, self.plan = [], None
        self._value_lines(data, 0)
        self._assign()
        self.done = set()
        lines = self._value_lines(data, 0)
        lines += self.plan.get(END, []) if self.plan else []
        return "\n".join(lines) + "\n"

    def _before(self, origin: Path | None, indent: int) -> list[str]:
        if self.plan is None:
            self.slots.append(origin)  # type: ignore[arg-type]
            return []
        if origin is None or origin in self.done:
            return []
        self.done.add(origin)
        return [" " * indent + c for c in self.plan.get(origin, [])]

    def _after(self, origin: Path | None) -> str:
        if self.plan is None or origin is None or origin not in self.trail:
            return ""
        comment = self.trail.pop(origin)
        return "  " + comment

    # -- values ------------------------------------------------------------------------------

    def _flow(self, value: Any) -> str | None:
        if isinstance(value, dict):
            parts = []
            for k, v in value.items():
                inner = self._flow(v)
                if inner is None:
                    return None
                parts.append(f"{scalar(k, flow=True)}: {inner}")
            return "{" + ", ".join(parts) + "}"
        if isinstance(value, list):
            items = [self._flow(v) for v in value]
            return None if any(i is None for i in items) else "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
        if isinstance(value, str) and "\n" in value:
            return None
        return scalar(value, flow=True)

    def _inline(self, value: Any, indent: int) -> str | None:
        """The value on the key's line, or None when it goes below it as a block."""
        if isinstance(value, dict | list):
            if not value:
                return "{}" if isinstance(value, dict) else "[]"
            if id(value) in self.o.flow:
                text = self._flow(value)
                if text is not None and len(text) + indent <= WIDTH:
                    return text
            return None
        if isinstance(value, str) and _block_ok(value):
            return None
        return scalar(value)

    def _value_lines(self, value: Any, indent: int) -> list[str]:
        if isinstance(value, dict):
            return self._map(value, indent)
        if isinstance(value, list):
            return self._seq(value, indent)
        inline = self._inline(value, indent)
        return [" " * indent + inline] if inline is not None else _block(str(value), indent)

    def _entry(self, head: str, value: Any, origin: Path | None, indent: int) -> list[str]:
        """``head`` is ``key:`` or ``-``; the value follows on the line or below."""
        out = self._before(origin, indent)
        inline = self._inline(value, indent)
        if inline is not None:
            return [*out, f"{' ' * indent}{head} {inline}{self._after(origin)}"]
        if isinstance(value, str):
            first, *rest = _block(value, indent + 2)
            return [*out, f"{' ' * indent}{head} {first}{self._after(origin)}", *rest]
        if head == "-" and isinstance(value, dict):
            body = self._map(value, indent + 2)
            lead = [ln for ln in body if ln.lstrip().startswith("#") and body.index(ln) < _first_key(body)]
            body = body[len(lead) :]
            body[0] = " " * indent + "- " + body[0][indent + 2 :]
            return [*out, *(" " * indent + ln.lstrip() for ln in lead), *body]
        child = indent + 2
        return [*out, f"{' ' * indent}{head}{self._after(origin)}", *self._value_lines(value, child)]

    def _map(self, value: dict[str, Any], indent: int) -> list[str]:
        out: list[str] = []
        for key, item in value.items():
            out += self._entry(f"{scalar(key)}:", item, self.o.get(value, key), indent)
        return out

    def _seq(self, value: list[Any], indent: int) -> list[str]:
        out: list[str] = []
        for i, item in enumerate(value):
            out += self._entry("-", item, self.o.get(value, i), indent)
        return out


def _first_key(lines: list[str]) -> int:
    for n, ln in enumerate(lines):
        if not ln.lstrip().startswith("#"):
            return n
    return len(lines)


def emit(data: Any, src: Source) -> str:
    return Emitter(src).document(data)
