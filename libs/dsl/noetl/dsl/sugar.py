"""Authoring sugar (SEMANTICS §21): `choose`, `while` and `until` compiled into canonical tasks.

The engine and the worker only ever run the canonical pipeline (tasks, `jump`, `break`), so the
sugar is removed here, right after the YAML is read and before any check runs: validation, the
normalized model, `noetl check` and the JSON view all see one canonical document. Two things make
that safe to show to a person:

- **Stable labels.** Every generated task is named after the sugar's own `name` (`route`,
  `route.0`, `route.0.exit`, `route.end`, `pages.repeat`, ...), so a compiled playbook, its
  events and its snapshots read the same from one version of the file to the next, and a
  redelivered loop iteration resumes at the same label.
- **Lines that point at the sugar.** The line map of the compiled document sends every path of a
  generated task to the line of the sugar it came from, and every moved task to its own line, so
  a validation error names the file:line the author wrote; the debug map lists, for every
  generated task, the sugar behind it (`noetl compile FILE` prints both).

Every branch of a `choose` ends at one merge point (`<name>.end`): a branch never falls through
into the next one. The generated tasks are `kind: noop` tasks without `result`, which pass
`_prev` on unchanged, so the sugar adds no value of its own to the pipeline's result.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from noetl.dsl.errors import Problem
from noetl.dsl.sugar_compiler import (
    SUGAR_KEYS,
    DebugEntry,
    _Compiler,
    _jump,
    _Next,
    _Out,
    _parents,
    _unwrap,
    is_sugar,
)
from noetl.dsl.yamlload import LineMap, LoadedYaml, Path, fmt_path, load_yaml

__all__ = [
    "SUGAR_KEYS",
    "Compiled",
    "DebugEntry",
    "compile_loaded",
    "compile_text",
    "is_sugar",
    "load_compiled",
    "render",
]


@dataclass
class Compiled:
    data: Any
    lines: LineMap
    problems: list[Problem] = field(default_factory=list)
    debug: list[DebugEntry] = field(default_factory=list)
    # compiled task path -> where it is written (a generated task: its sugar), both as shown
    origins: dict[str, tuple[str, bool]] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return bool(self.debug)

    def as_written(self, problem: Problem) -> Problem:
        """``problem`` with its path in the terms of the file as written (``tool[1].choose[0].do[0]``
        rather than the compiled ``tool[3]``), so the path and the line name the same place."""
        for shown in (problem.path, *_parents(problem.path)):
            found = self.origins.get(shown)
            if found is not None:
                raw, generated = found
                rest = "" if generated else problem.path[len(shown) :]
                return Problem(problem.file, problem.line, raw + rest, problem.message)
        return problem


def _finish(out: list[_Out]) -> None:
    """Resolve ``NEXT`` and turn the generated dispatch tables into task policies."""
    for k, o in enumerate(out):
        rules = o.body.pop("_rules", None) if isinstance(o.body, dict) else None
        if rules is None:
            continue
        nxt = out[k + 1].body.get("name") if k + 1 < len(out) and isinstance(out[k + 1].body, dict) else None
        compiled: list[dict[str, Any]] = []
        for when, to in rules:
            target = nxt if isinstance(to, _Next) else to
            if target is None or (when is None and target == nxt):
                continue  # a fallback to the task that follows anyway: a noop passes on by itself
            then = _jump(str(target))
            compiled.append({"when": when, "then": then} if when is not None else {"else": {"then": then}})
        if compiled:
            o.body["spec"] = {"policy": {"rules": compiled}}


def _remap_lines(old: LineMap, step_tool: Path, out: list[_Out], new: LineMap) -> None:
    """Lines of the compiled ``tool`` list: each task's sub-paths take the lines of the place it
    was written; a generated task (and its rules) the sugar's lines."""
    prefixes: dict[Path, Path] = {}
    for j, o in enumerate(out):
        path = (*step_tool, j)
        new.lines[path] = o.line
        if o.debug is None:
            prefixes[o.raw] = path
        else:
            for r, line in enumerate(o.rule_lines):
                new.lines[(*path, "spec", "policy", "rules", r)] = line
    for key, line in old.lines.items():
        if key[: len(step_tool)] != step_tool:
            continue
        for n in range(len(key), len(step_tool), -1):
            target = prefixes.get(key[:n])
            if target is not None:
                new.lines.setdefault(target + key[n:], line)
                break


def compile_loaded(loaded: LoadedYaml, file: str = "<playbook>") -> Compiled:
    """The canonical document of ``loaded`` (the same object when it holds no sugar)."""
    if loaded.data is None or not isinstance(loaded.data.get("workflow"), list):
        return Compiled(loaded.data, loaded.lines, list(loaded.problems))
    steps = loaded.data["workflow"]
    todo = [
        i
        for i, step in enumerate(steps)
        if isinstance(step, dict)
        and (
            any(is_sugar(t) for t in step["tool"])
            if isinstance(step.get("tool"), list)
            else is_sugar(step.get("tool"))
        )
    ]
    if not todo:
        return Compiled(loaded.data, loaded.lines, [])
    c = _Compiler(file, loaded.lines)
    data = dict(loaded.data)
    data["workflow"] = list(steps)
    new = LineMap(
        {k: v for k, v in loaded.lines.lines.items() if not _under_any(k, todo)}, dict(loaded.lines.aliases)
    )
    debug: list[DebugEntry] = []
    origins: dict[str, tuple[str, bool]] = {}
    for i in todo:
        step = dict(steps[i])
        tool_path: Path = ("workflow", i, "tool")
        tool = step["tool"]
        if isinstance(tool, dict):  # one sugar item as the whole `tool`
            label, body, raw = _unwrap(tool, tool_path)
            out = c.sugar(label, body or {}, raw)
        else:
            out = c.block(tool, tool_path, top=True)
        _finish(out)
        step["tool"] = [copy.copy(o.body) for o in out]
        data["workflow"][i] = step
        _remap_lines(loaded.lines, tool_path, out, new)
        for j, o in enumerate(out):
            shown, raw_shown = fmt_path((*tool_path, j)), fmt_path(o.debug[2] if o.debug else o.raw)
            if shown != raw_shown:
                origins[shown] = (raw_shown, o.debug is not None)
            if o.debug is not None:
                sugar, role, source = o.debug
                debug.append(
                    DebugEntry(
                        o.body["name"],
                        fmt_path((*tool_path, j)),
                        sugar,
                        role,
                        fmt_path(source),
                        loaded.lines.line(source),
                    )
                )
    for i in todo:  # what lies outside the rewritten lists keeps its lines
        for key, line in loaded.lines.lines.items():
            if key[:2] == ("workflow", i) and key[2:3] != ("tool",):
                new.lines.setdefault(key, line)
        new.lines.setdefault(("workflow", i, "tool"), loaded.lines.line(("workflow", i, "tool")))
    return Compiled(data, new, sorted(c.problems, key=lambda p: p.line), debug, origins)


def _under_any(key: Path, steps: list[int]) -> bool:
    return len(key) >= 2 and key[0] == "workflow" and key[1] in steps


def compile_text(text: str, file: str = "<playbook>") -> Compiled:
    """Read ``text`` and compile its sugar; YAML problems come back in ``problems``."""
    loaded = load_yaml(text, file)
    if loaded.problems:
        return Compiled(None, loaded.lines, list(loaded.problems))
    return compile_loaded(loaded, file)


def load_compiled(text: str, file: str = "<playbook>") -> LoadedYaml:
    """``load_yaml`` for the canonical document: what every check and the normalizer read."""
    c = compile_text(text, file)
    return LoadedYaml(None if c.problems else c.data, c.lines, c.problems)


class _Dumper(yaml.SafeDumper):
    """Block style, multi-line strings as literal blocks: the compiled playbook reads like one
    written by hand."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None  # the emitter falls back to quotes where a block cannot hold it
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render(compiled: Compiled, file: str) -> str:
    """The canonical playbook as YAML, followed by its debug map as comments (``noetl compile``)."""
    text = yaml.dump(compiled.data, Dumper=_Dumper, sort_keys=False, width=110, allow_unicode=True)
    if not compiled.debug:
        return text + f"# {file}: no sugar; the playbook is canonical as written\n"
    out = [text, f"# debug map: generated task <- the sugar it came from in {file}\n"]
    out.extend(
        f"#   {d.path} {d.label} ({d.role}) <- {file}:{d.line} {d.source} ({d.sugar})\n"
        for d in compiled.debug
    )
    return "".join(out)
