"""What the upstream translation knows before it rewrites anything (part of upstream.py).

The names a template reads depend on facts about the whole playbook: the workload's keys, which
step results a later step reads (those are kept in ctx), each step's tool kind and statement
count (for result shapes), its task labels (never renamed). :class:`UpstreamFacts` gathers them;
the passes over tasks, steps and joins build on it.
"""

from __future__ import annotations

import re
from pathlib import Path as FsPath
from typing import Any

from noetl.dsl.migrate.core import Migrator, Pipeline
from noetl.dsl.migrate.jinja import inner, wrap
from noetl.dsl.migrate.routing import router, structural
from noetl.dsl.migrate.steps import _loop, _tool_shape
from noetl.dsl.migrate.upstream_names import (
    NAMESPACES,
    StepFacts,
    names_read,
    rename,
    shape_renames,
    statement_count,
    strings,
)
from noetl.dsl.migrate.upstream_python import main_params
from noetl.dsl.yamlload import Path

SQL = ("postgres", "duckdb", "snowflake")


class UpstreamFacts:
    """The facts about one playbook that every later pass reads; the passes subclass it."""

    def __init__(self, m: Migrator, doc: dict[str, Any]) -> None:
        self.m = m
        self.doc = doc
        self.steps: list[dict[str, Any]] = [s for s in doc["workflow"] if isinstance(s, dict)]
        self.paths: dict[int, Path] = {}
        for i, step in enumerate(doc["workflow"]):
            if isinstance(step, dict):
                self.paths[id(step)] = m.origin(doc["workflow"], i) or ("workflow", i)
        workload = doc.get("workload")
        self.workload = {k for k in workload if isinstance(k, str)} if isinstance(workload, dict) else set()
        self.templated = self._templated_workload(workload if isinstance(workload, dict) else {})
        self.facts: dict[str, StepFacts] = {}
        self.captured: set[str] = set()
        self.auth: dict[str, str] = {}
        self.base = FsPath(m.file).parent if m.file and not m.file.startswith("<") else None

    def _templated_workload(self, workload: dict[str, Any]) -> dict[str, str]:
        """Workload values that are one template (`run: "{{ job.uuid }}"`): upstream renders them
        when the execution starts, this engine never renders the workload, so each use reads the
        expression instead (payload names and workload keys in it translated too)."""
        out: dict[str, str] = {}
        plain = {k for k, v in workload.items() if not (isinstance(v, str) and "{{" in v)}
        renames = {k: f"workload.{k}" for k in plain if isinstance(k, str) and k not in NAMESPACES}
        renames.update({"payload": "workload", "job.uuid": "execution_id", "job.id": "execution_id"})
        for key, value in workload.items():
            if not (isinstance(key, str) and isinstance(value, str) and "{{" in value):
                continue
            expr = inner(value)
            if expr == value.strip():
                self.m.did(
                    ("workload", key),
                    f"workload `{key}` mixes text and a template: upstream renders "
                    "it, this engine does not: it is kept as written",
                )
                continue
            out[key] = f"({inner(str(rename(wrap(expr), dict(renames))))})"
            self.m.did(
                ("workload", key),
                f"workload `{key}` is a template upstream renders at the start: its uses read "
                f"`{out[key]}` (a payload value for `{key}` no longer replaces it)",
            )
        return out

    # -- structure first: tool shape, loop knobs, next lists ----------------------------------

    def _shape(self, step: dict[str, Any], path: Path) -> None:
        _tool_shape(self.m, step, path)
        _loop(self.m, step, path)
        loop = isinstance(step.get("loop"), dict)
        if "next" in step and not (isinstance(step["next"], dict) and "arcs" in step["next"]):
            router(self.m, step, path, structural(self.m, step, path, loop))

    def _tasks(self, step: dict[str, Any], path: Path) -> list[tuple[str, dict[str, Any], Path]]:
        tool = step.get("tool")
        out = []
        for j, (label, body) in enumerate(Pipeline(self.m, step).bodies()):
            where = (*path, "tool") if isinstance(tool, dict) else (*path, "tool", j)
            if isinstance(tool, list) and isinstance(tool[j], dict) and tool[j] is not body:
                where = (*where, label)
            out.append((label, body, where))
        return out

    def _facts(self) -> None:
        for step in self.steps:
            name = str(step.get("step"))
            tasks = self._tasks(step, self.paths[id(step)])
            last = tasks[-1][1] if tasks else {}
            kind = last.get("kind") if isinstance(last.get("kind"), str) else None
            sql = last.get("command", last.get("query"))
            self.facts[name] = StepFacts(
                name,
                kind,
                statement_count(sql) if kind in SQL else 1,
                isinstance(step.get("loop"), dict),
                [label for label, _, _ in tasks],
            )

    # -- names ----------------------------------------------------------------------------

    def _iterator(self, step: dict[str, Any]) -> str | None:
        loop = step.get("loop")
        it = loop.get("iterator") if isinstance(loop, dict) else None
        return it if isinstance(it, str) else None

    def base_renames(self, step: dict[str, Any], *, iterator: bool = True) -> dict[str, str]:
        """Names every template of ``step`` reads: workload keys, captured step results, the
        iterator; never the step's own task labels (they are this engine's names too)."""
        own = str(step.get("step"))
        labels = set(self.facts[own].labels) if own in self.facts else set()
        out: dict[str, str] = {}
        # upstream's request payload and job id: here the payload is merged into `workload`
        for name, target in (
            ("payload", "workload"),
            ("job.uuid", "execution_id"),
            ("job.id", "execution_id"),
        ):
            if name.split(".")[0] not in self.workload and name.split(".")[0] not in labels:
                out[name] = target
        for key in self.workload:
            if key not in NAMESPACES and key not in labels:
                out[key] = self.templated.get(key, f"workload.{key}")
        for key, expr in self.templated.items():
            out[f"workload.{key}"] = expr
        for name in self.captured:
            if name != own and name not in labels:
                f = self.facts[name]
                out.update(shape_renames(name, f"ctx.{name}", f.kind, f.statements))
        it = self._iterator(step)
        if iterator and it:
            out[it] = f"iter.{it}"
            out["_index"] = "iter.index"  # upstream's loop index
        return out

    def _name_notes(self) -> None:
        """One note per step for the names its templates read the upstream way (before renaming)."""
        for step in self.steps:
            own = str(step.get("step"))
            body = {k: v for k, v in step.items() if k != "step"}
            labels = set(self.facts[own].labels)
            keys = names_read(body, self.workload - NAMESPACES - labels)
            results = names_read(body, self.captured - {own} - labels)
            it = self._iterator(step)
            bare = names_read({k: v for k, v in body.items() if k != "loop"}, {it} - labels) if it else set()
            path = self.paths[id(step)]
            if keys:
                listed = ", ".join(f"`{k}`" for k in sorted(keys))
                self.m.did(path, f"workload keys read as bare names ({listed}) → `workload.<key>`")
            if results:
                listed = ", ".join(f"`{k}`" for k in sorted(results))
                self.m.did(path, f"step results read by the step's name ({listed}) → `ctx.<step>`")
            if bare:
                self.m.did(path, f"the loop iterator read as a bare name (`{it}`) → `iter.{it}`")
            text = " ".join(strings(body))
            for name in sorted(results | ({own} if own in self.captured or "set" in step else set())):
                kind = self.facts[name].kind
                shapes = re.findall(
                    rf"(?<![\w.]){re.escape(name)}\.(status_code|body|command_\d+|row_count)\b", text
                )
                if shapes:
                    listed = ", ".join(f"`{name}.{x}`" for x in sorted(set(shapes)))
                    self.m.did(
                        path,
                        f"{listed}: upstream's {kind} result shape, read here as this engine's "
                        "(`status`, `data`; a SQL task's last statement `rows`, `rowcount`)",
                    )

    def _find_captures(self) -> None:
        """A step's result is kept in ctx when a later step reads it by name (in a template, or
        as a python `main` parameter upstream filled from the context)."""
        names = {n for n, f in self.facts.items() if f.kind is not None}
        for step in self.steps:
            own = str(step.get("step"))
            others = names - {own} - set(self.facts[own].labels)
            reads = names_read({k: v for k, v in step.items() if k != "step"}, others)
            for _, task, _ in self._tasks(step, self.paths[id(step)]):
                code = task.get("code")
                if task.get("kind") == "python" and isinstance(code, str):
                    params = main_params(code) or []
                    args = _d if isinstance(_d := task.get("args"), dict) else {}
                    given = set(args) | set(task.get("input") or {})
                    reads |= {p for p in params if p in others and p not in given}
            self.captured |= reads
