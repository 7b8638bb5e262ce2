"""What upstream NoETL's template names become here, place by place.

Upstream renders every template against one flat context: the workload's keys as bare names
(`{{ api_url }}`), each finished step's result under the step's name (`{{ fetch.data }}`), the
loop element under the iterator's bare name, and in task rules the tool's outcome as `output`
(`output.data` is the result). Here each fact has one scope (SEMANTICS §4): `workload.api_url`,
`ctx.fetch` (the migration keeps a step's result in ctx when a later step reads it),
`iter.city`, `outcome.result`. The maps built here say, for one place, what each upstream name
becomes; :func:`rename` applies one to a value without renaming the names a template defines
itself (`{% for row in rows %}`, `{% set n = ... %}`).

Result shapes differ too: upstream's http result is `{status_code, headers, url, elapsed, data}`
(some fixtures read `body`), this engine's `{status, headers, data}`; upstream's postgres result
was keyed per statement (`command_0.rows`), this engine's is the last statement's
`{rows, columns, rowcount}`. :func:`shape_renames` adapts the paths templates read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.migrate.jinja import rewrite_all

# names every template here already has: never a workload key's or a step's bare name
NAMESPACES = frozenset(
    {
        "workload",
        "ctx",
        "iter",
        "args",
        "keychain",
        "execution_id",
        "outcome",
        "event",
        "_prev",
        "_task",
        "_attempt",
        "loop",
        "range",
        "dict",
        "lipsum",
        "cycler",
        "joiner",
        "namespace",
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
    }
)
_LOCAL = re.compile(r"\{%-?\s*(?:for\s+([\w\s,()]+?)\s+in\b|set\s+(\w+)\s*=|macro\s+\w+\(([^)]*)\))")


def template_locals(text: str) -> set[str]:
    """Names a template binds itself (for targets, `set`, macro parameters)."""
    out: set[str] = set()
    for m in _LOCAL.finditer(text):
        for group in m.groups():
            if group:
                out.update(n for n in re.split(r"[\s,()=]+", group) if n and n.isidentifier())
    return out


def _without(renames: dict[str, str], names: set[str]) -> dict[str, str]:
    if not names:
        return renames
    return {k: v for k, v in renames.items() if k.split(".", 1)[0] not in names}


def rename(value: Any, renames: dict[str, str]) -> Any:
    """``value`` with every template rewritten through ``renames`` (in place for containers),
    leaving alone the names each template binds itself."""
    if isinstance(value, str):
        return rewrite_all(value, _without(renames, template_locals(value)))
    if isinstance(value, dict):
        for k in list(value):
            value[k] = rename(value[k], renames)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            value[n] = rename(item, renames)
    return value


_PROBE = "\x00"


def strings(value: Any) -> list[str]:
    """Every string inside ``value``: the places a template can be."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def names_read(value: Any, candidates: set[str]) -> set[str]:
    """Which of ``candidates`` the templates in ``value`` read as bare names."""
    if not candidates:
        return set()
    probe = {c: f"{_PROBE}{c}{_PROBE}" for c in candidates}
    found: set[str] = set()
    for text in strings(value):
        out = rename(text, dict(probe))
        found.update(re.findall(rf"{_PROBE}(\w+){_PROBE}", str(out)))
    return found


def statement_count(sql: Any) -> int:
    """How many `;`-separated statements ``sql`` holds (quotes and comments respected enough
    for the index of the last one: upstream numbered them from 0)."""
    if not isinstance(sql, str):
        return 1
    count, quote, i, n = 0, "", 0, len(sql)
    current = ""
    while i < n:
        c = sql[i]
        if quote:
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif sql.startswith("--", i):
            j = sql.find("\n", i)
            i = n if j == -1 else j
            continue
        elif c == ";":
            if current.strip():
                count += 1
            current = ""
            i += 1
            continue
        current += c
        i += 1
    if current.strip():
        count += 1
    return max(count, 1)


@dataclass
class StepFacts:
    """What the migration knows of one upstream step: its result's kind, for shape adaptation."""

    name: str
    kind: str | None  # kind of the task whose result is the step's result (the last task)
    statements: int = 1  # for postgres: statements of the last task
    loop: bool = False
    labels: list[str] = field(default_factory=list)


def shape_renames(prefix: str, target: str, kind: str | None, statements: int) -> dict[str, str]:
    """Renames for paths under ``prefix`` (an upstream result) read at ``target`` here."""
    out = {prefix: target}
    if kind == "http":
        out[f"{prefix}.status_code"] = f"{target}.status"
        out[f"{prefix}.body"] = f"{target}.data"
    elif kind in ("postgres", "duckdb", "snowflake"):
        last = statements - 1
        out[f"{prefix}.command_{last}"] = target
        out[f"{prefix}.row_count"] = f"{target}.rowcount"
        out[f"{prefix}.command_{last}.row_count"] = f"{target}.rowcount"
    return out


def unreachable_commands(text: str, prefix: str, statements: int) -> list[str]:
    """`<prefix>.command_N` paths with N other than the last statement: this engine returns the
    last statement's rows only, so they have no translation."""
    found = re.findall(rf"(?<![\w.]){re.escape(prefix)}\.command_(\d+)", text)
    return sorted({f"{prefix}.command_{n}" for n in found if int(n) != statements - 1})
