"""Every string of the document must parse as a Jinja2 template.

Parsing (not rendering) is all validation can do without data, and it is enough to catch the
typo that would otherwise fail a run hours in (``"{{ workload.x "``). Tasks are walked under
their normalized paths so the message names ``workflow[0].tool[0].result`` whatever shape the
task was written in.
"""

from __future__ import annotations

from typing import Any

from jinja2 import TemplateSyntaxError
from jinja2.sandbox import SandboxedEnvironment

from noetl.dsl.report import Report
from noetl.dsl.shapes import task_entries
from noetl.dsl.yamlload import Path

_MARKERS = ("{{", "{%", "{#")
_env = SandboxedEnvironment()


def _check_string(text: str, path: Path, r: Report) -> None:
    if not any(m in text for m in _MARKERS):
        return  # plain text always parses
    try:
        _env.parse(text)
    except TemplateSyntaxError as e:
        where = f" (line {e.lineno} of the template)" if e.lineno and "\n" in text else ""
        r.add(path, f"template does not parse: {e.message}{where}")
    except Exception as e:  # the parser can fail in other ways on hostile input (deep nesting)
        r.add(path, f"template does not parse: {type(e).__name__}")


def check_strings(value: Any, path: Path, r: Report) -> None:
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            _check_string(node, where, r)
        elif isinstance(node, dict):
            stack.extend((v, (*where, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(node))


def check_templates(doc: dict[str, Any], r: Report) -> None:
    for key, value in doc.items():
        if key != "workflow" or not isinstance(value, list):
            check_strings(value, (key,), r)
            continue
        for i, step in enumerate(value):
            if not isinstance(step, dict):
                check_strings(step, ("workflow", i), r)
                continue
            for skey, svalue in step.items():
                if skey != "tool":
                    check_strings(svalue, ("workflow", i, skey), r)
            for entry in task_entries(step.get("step"), step.get("tool"), ("workflow", i)):
                if entry.body is not None:  # a malformed entry is reported by the pipeline check
                    r.lines.alias(entry.path, entry.raw)
                    # `code` (python) and `script` are run as written, never templates
                    body = {k: v for k, v in entry.body.items() if k not in ("code", "script")} \
                        if isinstance(entry.body, dict) else entry.body
                    check_strings(body, entry.path, r)
