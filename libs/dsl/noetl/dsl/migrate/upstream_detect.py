"""Is this upstream NoETL's dialect? The constructs that say so, with where they are.

Upstream's playbooks declare `apiVersion: noetl.io/v2` like this engine's, so the header cannot
tell them apart; what can is a construct only upstream writes: a task's `input`, `set` on a
step, a rule's `then` or an arc, a rule that reads `output.*`, an `else` rule without `then`, a
step's `input` or `output`, python `libs`/`input_data`/`script`, or a task kind that only
upstream has. `noetl validate` and `noetl check` name the first few of them in one line and point
at `noetl migrate --from upstream` instead of printing one error per construct.
"""

from __future__ import annotations

import re
from typing import Any

from noetl.dsl.migrate.upstream_names import NAMESPACES, names_read
from noetl.dsl.yamlload import Path

UPSTREAM_KINDS = frozenset(
    {
        "shell",
        "nats",
        "container",
        "artifact",
        "transfer",
        "snowflake",
        "snowflake_transfer",
        "gcs",
        "gateway",
        "agent",
        "ducklake",
        "rhai",
        "task_sequence",
        "iterator",
        "playbooks",
    }
)
_OUTPUT_READ = re.compile(r"(?<![\w.])output\.(status|data|error|http|result|ref|meta)\b")


def _tasks(step: dict[str, Any], path: Path) -> list[tuple[dict[str, Any], Path]]:
    tool = step.get("tool")
    if isinstance(tool, dict):
        return [(tool, (*path, "tool"))]
    out: list[tuple[dict[str, Any], Path]] = []
    for j, item in enumerate(tool if isinstance(tool, list) else []):
        if not isinstance(item, dict):
            continue
        if "kind" not in item and len(item) == 1 and isinstance(next(iter(item.values())), dict):
            ((label, body),) = item.items()
            out.append((body, (*path, "tool", j, label)))
        else:
            out.append((item, (*path, "tool", j)))
    return out


def _rules(task: dict[str, Any]) -> list[Any]:
    spec = task.get("spec")
    policy = spec.get("policy") if isinstance(spec, dict) else None
    rules = policy.get("rules") if isinstance(policy, dict) else None
    return rules if isinstance(rules, list) else []


def upstream_signals(data: Any) -> list[tuple[Path, str]]:
    """(path, construct) for each upstream-only construct in ``data`` (a loaded playbook)."""
    if not isinstance(data, dict) or not isinstance(data.get("workflow"), list):
        return []
    found: list[tuple[Path, str]] = []
    workload = data.get("workload")
    keys = {k for k in workload if isinstance(k, str)} - NAMESPACES if isinstance(workload, dict) else set()
    steps = {s.get("step") for s in data["workflow"] if isinstance(s, dict) and s.get("tool")}
    for i, step in enumerate(data["workflow"]):
        if not isinstance(step, dict):
            continue
        path: Path = ("workflow", i)
        labels = {label for task, where in _tasks(step, path) for label in [where[-1], task.get("name")]}
        loop = step.get("loop")
        iterator = loop.get("iterator") if isinstance(loop, dict) else None
        body = {k: v for k, v in step.items() if k != "step"}
        for name in sorted(names_read(body, keys - labels - {iterator})):
            found.append((path, f"workload key `{name}` read as a bare name"))
        for name in sorted(names_read(body, {str(n) for n in steps} - labels - {step.get("step"), iterator})):
            found.append((path, f"step `{name}`'s result read by name"))
        for key in ("set", "input", "output", "set_ctx", "set_iter"):
            if key in step:
                found.append(((*path, key), f"step `{key}`"))
        nxt = step.get("next")
        for k, arc in enumerate(nxt.get("arcs") or [] if isinstance(nxt, dict) else []):
            if isinstance(arc, dict) and "set" in arc:
                found.append(((*path, "next", "arcs", k, "set"), "arc `set`"))
        for task, where in _tasks(step, path):
            if isinstance(task.get("input"), dict):
                found.append(((*where, "input"), "task `input`"))
            if task.get("kind") == "python":
                for key in ("libs", "input_data", "script", "code_b64", "code_base64"):
                    if key in task:
                        found.append(((*where, key), f"python `{key}`"))
            if task.get("kind") in UPSTREAM_KINDS:
                found.append(((*where, "kind"), f"`kind: {task['kind']}`"))
            if isinstance(task.get("output"), dict):
                found.append(((*where, "output"), "task `output`"))
            for n, rule in enumerate(_rules(task)):
                at = (*where, "spec", "policy", "rules", n)
                if not isinstance(rule, dict):
                    continue
                then = rule.get("then")
                if isinstance(then, dict) and "set" in then:
                    found.append(((*at, "then", "set"), "rule `then.set`"))
                if isinstance(rule.get("else"), dict) and "then" not in rule["else"] and "then" not in rule:
                    found.append(((*at, "else"), "`else` without `then`"))
                if isinstance(rule.get("when"), str) and _OUTPUT_READ.search(rule["when"]):
                    found.append(((*at, "when"), "`output.*` in a task rule"))
    return found


def describe_signals(signals: list[tuple[Path, str]], lines: dict[Path, int], limit: int = 3) -> str:
    """`task `input` (line 12), step `set` (line 30), ...` for the first few distinct constructs."""
    seen: dict[str, int] = {}
    for path, what in signals:
        if what not in seen:
            line = next((lines[p] for p in (path[:k] for k in range(len(path), 0, -1)) if p in lines), 1)
            seen[what] = line
    parts = [f"{what} (line {line})" for what, line in list(seen.items())[:limit]]
    more = len(seen) - limit
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")
