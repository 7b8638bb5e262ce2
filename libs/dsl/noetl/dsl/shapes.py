"""The four ways to write a step's tasks, reduced to one list of labelled entries.

SEMANTICS §3 accepts a canonical list (``- name: fetch``), the labelled list of spec 000 §9.1
(``- fetch: {kind: http}``), unnamed list items (labelled ``task_<position>``) and a single
object (labelled ``<step>_task``). Validation and normalization both start from this one
reading, so they cannot disagree about which label a task has or where it is in the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl.dsl.yamlload import Path

# keys that only ever appear in the task itself, so a single-key item using one is never a label
_TASK_FIELDS = frozenset({"name", "kind", "spec"})


@dataclass(frozen=True)
class TaskEntry:
    label: str | None  # None when the shape gives no usable label
    body: dict[str, Any] | None  # the task mapping (label wrapper removed); None when malformed
    path: Path  # normalized: ("workflow", i, "tool", j)
    raw: Path  # where ``body`` is written in the file
    labelled: bool = False  # written as ``- label: {kind: ...}``
    problem: str | None = None  # why the entry is not a task at all


def _label_of(body: dict[str, Any], fallback: str) -> str | None:
    name = body.get("name", fallback)
    return name if isinstance(name, str) and name else None


def task_entries(step_name: Any, tool: Any, step_path: Path) -> list[TaskEntry]:
    """Read ``step.tool`` in whichever shape it was written; never raises."""
    base = (*step_path, "tool")
    if tool is None:
        return []
    if isinstance(tool, dict):
        default = f"{step_name}_task" if isinstance(step_name, str) and step_name else "task_0"
        return [TaskEntry(_label_of(tool, default), tool, (*base, 0), base)]
    if not isinstance(tool, list):
        return [
            TaskEntry(
                None,
                None,
                base,
                base,
                problem="`tool` must be a list of tasks or one task mapping (`tool: {kind: noop}`)",
            )
        ]
    out: list[TaskEntry] = []
    for j, item in enumerate(tool):
        path = (*base, j)
        if not isinstance(item, dict):
            out.append(
                TaskEntry(
                    None,
                    None,
                    path,
                    path,
                    problem="a task is a mapping: `- name: <label>` with `kind: <kind>` and its fields",
                )
            )
        elif "kind" not in item and len(item) == 1:
            ((label, inner),) = item.items()
            if isinstance(inner, dict) and label not in _TASK_FIELDS:
                out.append(TaskEntry(label, inner, path, (*path, label), labelled=True))
            else:
                out.append(TaskEntry(_label_of(item, f"task_{j}"), item, path, path))
        else:
            out.append(TaskEntry(_label_of(item, f"task_{j}"), item, path, path))
    return out
