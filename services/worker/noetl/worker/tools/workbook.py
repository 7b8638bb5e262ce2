"""Resolving ``kind: workbook`` tasks against the playbook's ``workbook.tasks`` templates.

A pure function so the pipeline runner can resolve before it renders (template fields hold
templates too) and validation can reuse it. The caller's fields win over the template's; maps
merge and lists replace, the same rule as spec layering, so a caller can override one header
or one policy knob without restating the whole template.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl.dsl.errors import ToolError
from noetl.dsl.specmerge import deep_merge


def resolve_workbook(config: dict[str, Any], kind: str,
                     workbook: Mapping[str, Mapping[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The kind and fields a task runs as.

    ``workbook`` is ``workbook.tasks`` (template name → template). For a task of any other kind
    the task is returned unchanged. A template may itself be a ``workbook`` task (a variant of
    another template); cycles are an error. The returned fields hold neither ``kind`` nor
    ``task``: the kind is the first element of the tuple.
    """
    fields = {k: v for k, v in config.items() if k != "kind"}
    seen: list[str] = []
    while kind == "workbook":
        name = fields.pop("task", None)
        if not isinstance(name, str) or not name:
            raise ToolError("a workbook task needs `task`: the name of a template in workbook.tasks")
        if name in seen:
            cycle = " -> ".join([*seen, name])
            raise ToolError(f"workbook templates refer to each other in a cycle: {cycle}")
        seen.append(name)
        template = workbook.get(name) if workbook else None
        if not isinstance(template, Mapping):
            known = ", ".join(sorted(workbook)) if workbook else "none"
            raise ToolError(f"workbook task '{name}' is not defined in workbook.tasks (known: {known})")
        template_kind = template.get("kind")
        if not isinstance(template_kind, str) or not template_kind:
            raise ToolError(f"workbook task '{name}' has no `kind`")
        fields = deep_merge({k: v for k, v in template.items() if k != "kind"}, fields)
        kind = template_kind
    return kind, fields
