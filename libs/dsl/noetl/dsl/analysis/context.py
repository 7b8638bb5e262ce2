"""What every check shares: the normalized playbook, where its parts are in the file, and who
writes which ctx key.

Paths are tuples in the raw document's terms so the line map of the YAML loader finds them;
a task written in the labelled form (``- fetch: {kind: http}``) is aliased to its normalized
path the same way validation does, so findings name the lines validation would.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.analysis.exprs import UNKNOWN, literal
from noetl.dsl.analysis.report import Finding, finding
from noetl.dsl.model import Playbook, Rule, Step, Task
from noetl.dsl.shapes import task_entries
from noetl.dsl.sugar import load_compiled
from noetl.dsl.yamlload import LineMap, Path, fmt_path


def step_path(i: int) -> Path:
    return ("workflow", i)


def task_path(i: int, j: int) -> Path:
    return ("workflow", i, "tool", j)


def rule_path(i: int, j: int, r: int) -> Path:
    return (*task_path(i, j), "spec", "policy", "rules", r)


def arc_path(i: int, k: int) -> Path:
    return ("workflow", i, "next", "arcs", k)


def admit_rule_path(i: int, r: int) -> Path:
    return ("workflow", i, "spec", "policy", "admit", "rules", r)


def rule_then(rule: Rule) -> dict[str, Any]:
    return rule.then if isinstance(rule.then, dict) else {}


@dataclass
class Analysis:
    playbook: Playbook
    lines: LineMap
    findings: list[Finding] = field(default_factory=list)
    # ctx key → [(step name, value as the evaluator sees it)]
    ctx_writers: dict[str, list[tuple[str, Any]]] = field(default_factory=dict)

    @classmethod
    def build(cls, playbook: Playbook) -> Analysis:
        loaded = load_compiled(playbook.source, playbook.file)
        lines = loaded.lines
        if isinstance(loaded.data, dict) and isinstance(loaded.data.get("workflow"), list):
            for i, step in enumerate(loaded.data["workflow"]):
                if isinstance(step, dict):
                    for e in task_entries(step.get("step"), step.get("tool"), step_path(i)):
                        lines.alias(e.path, e.raw)
        a = cls(playbook, lines)
        for step in playbook.workflow:
            for _, _, then in a.task_thens(step):
                for key, value in (then.get("set_ctx") or {}).items():
                    top = str(key).split(".", 1)[0]
                    seen = literal(value) if "." not in str(key) else UNKNOWN
                    a.ctx_writers.setdefault(top, []).append((step.name, seen))
        return a

    def index(self, step: Step | str) -> int:
        name = step if isinstance(step, str) else step.name
        for i, s in enumerate(self.playbook.workflow):
            if s.name == name:
                return i
        raise KeyError(name)

    def add(self, code: str, path: Path, message: str, *, guarded: bool = False) -> None:
        self.findings.append(
            finding(code, self.playbook.file, self.lines.line(path), fmt_path(path), message, guarded=guarded)
        )

    def task_policy_rules(self, task: Task) -> tuple[Rule, ...]:
        """The rules that decide after ``task``: its own, or its workbook template's (normalize
        gives a workbook task its template's policy, so ``Task.policy`` holds either)."""
        return task.policy.rules if task.policy is not None else ()

    def task_thens(self, step: Step) -> Iterator[tuple[int, Task, dict[str, Any]]]:
        for j, task in enumerate(step.tool):
            for rule in self.task_policy_rules(task):
                yield j, task, rule_then(rule)

    def writes_of(self, step: Step, tasks: set[int] | None = None) -> set[str]:
        """Top-level ctx keys the step's task rules may write (only tasks in ``tasks`` if given)."""
        out: set[str] = set()
        for j, _, then in self.task_thens(step):
            if tasks is None or j in tasks:
                out.update(str(k).split(".", 1)[0] for k in (then.get("set_ctx") or {}))
        return out

