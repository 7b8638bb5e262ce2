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
from noetl.dsl.report import describe, type_name
from noetl.dsl.yamlload import LineMap, LoadedYaml, Path, fmt_path, load_yaml

SUGAR_KEYS = ("choose", "while", "until")
_ALLOWED = {
    "choose": ("name", "desc", "choose"),
    "while": ("name", "desc", "while", "do"),
    "until": ("name", "desc", "until", "do"),
}
_TASK_FIELDS = frozenset({"name", "kind", "spec"})


class _Next:
    """A jump target meaning "the task that follows in the compiled list" (resolved last)."""


NEXT = _Next()


@dataclass(frozen=True)
class DebugEntry:
    """One generated task and the sugar it stands for."""

    label: str
    path: str  # where the task is in the compiled document
    sugar: str  # choose | while | until
    role: str  # dispatch, branch, exit, merge, test, repeat, entry
    source: str  # the sugar's path in the file as written
    line: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": self.path,
            "sugar": self.sugar,
            "role": self.role,
            "source": self.source,
            "line": self.line,
        }

    def __str__(self) -> str:
        return f"{self.path} {self.label} ({self.role}) <- line {self.line} {self.source} ({self.sugar})"


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


def _parents(shown: str) -> list[str]:
    """``a.b[2].c`` -> ``a.b[2]``, ``a.b``, ``a`` (longest first)."""
    out = []
    for k in range(len(shown) - 1, 0, -1):
        if shown[k] in ".[":
            out.append(shown[:k])
    return out


@dataclass
class _Out:
    """One task of the compiled list: its body, where it was written, and its line."""

    body: dict[str, Any]
    raw: Path  # the file path whose sub-paths this task's sub-paths map to
    line: int
    debug: tuple[str, str, Path] | None = None  # (sugar, role, source path) for a generated task
    rule_lines: tuple[int, ...] = ()


def is_sugar(item: Any) -> bool:
    """A list item written as `choose`/`while`/`until` (canonical or labelled form)."""
    return _unwrap(item, ())[1] is not None


def _unwrap(item: Any, path: Path) -> tuple[str | None, dict[str, Any] | None, Path]:
    """``(label, body, raw path)`` when ``item`` is sugar, else ``(None, None, path)``."""
    if not isinstance(item, dict) or "kind" in item:
        return None, None, path
    if any(k in item for k in SUGAR_KEYS):
        name = item.get("name")
        return (name if isinstance(name, str) else None), item, path
    if len(item) == 1:
        ((label, inner),) = item.items()
        if (
            isinstance(inner, dict)
            and label not in _TASK_FIELDS
            and "kind" not in inner
            and any(k in inner for k in SUGAR_KEYS)
        ):
            return label, inner, (*path, label)
    return None, None, path


class _Compiler:
    def __init__(self, file: str, lines: LineMap) -> None:
        self.file = file
        self.lines = lines
        self.problems: list[Problem] = []

    def problem(self, path: Path, message: str) -> None:
        self.problems.append(Problem(self.file, self.lines.line(path), fmt_path(path), message))

    # --- one list of items --------------------------------------------------------------

    def block(self, items: list[Any], base: Path, *, top: bool) -> list[_Out]:
        out: list[_Out] = []
        for j, item in enumerate(items):
            path = (*base, j)
            label, body, raw = _unwrap(item, path)
            if body is not None:
                out.extend(self.sugar(label, body, raw))
            else:
                out.append(self.task(item, path, j, top=top))
        return out

    def task(self, item: Any, path: Path, j: int, *, top: bool) -> _Out:
        """A task as it is (canonical), with the labelled or unnamed forms made canonical so its
        label does not change with its new position."""
        line = self.lines.line(path)
        if not isinstance(item, dict):
            return _Out(item, path, line)  # validation says what is wrong with it
        if "kind" not in item and len(item) == 1:
            ((label, inner),) = item.items()
            if isinstance(inner, dict) and label not in _TASK_FIELDS and "name" not in inner:
                return _Out({"name": label, **inner}, (*path, label), line)
            return _Out(item, path, line)
        if "name" not in item:
            if not top:
                self.problem(
                    path,
                    "a task inside a `do` of `choose`/`while`/`until` needs `name: <label>` "
                    "(or the labelled form `- <label>: {kind: ...}`): positional labels would change "
                    "when the sugar is compiled",
                )
            return _Out({"name": f"task_{j}", **item}, path, line)
        return _Out(item, path, line)

    def do_list(self, body: dict[str, Any], key_path: Path, what: str, *, empty_ok: bool) -> list[Any] | None:
        value = body.get("do")
        if "do" not in body:
            self.problem(key_path, f"{what} needs `do: [<tasks>]`: the tasks it runs")
            return None
        if not isinstance(value, list):
            self.problem((*key_path, "do"), f"`do` is a list of tasks, found {type_name(value)}")
            return None
        if not value and not empty_ok:
            self.problem((*key_path, "do"), f"{what} needs at least one task in `do`")
            return None
        return value

    def condition(self, value: Any, path: Path, keyword: str) -> bool:
        if isinstance(value, str | bool):
            return True
        self.problem(
            path,
            f'`{keyword}` is a condition: a template such as "{{{{ iter.has_more }}}}" or true/false, '
            f"found {type_name(value)}",
        )
        return False

    # --- sugar ---------------------------------------------------------------------------

    def sugar(self, label: str | None, body: dict[str, Any], raw: Path) -> list[_Out]:
        keywords = [k for k in SUGAR_KEYS if k in body]
        if len(keywords) > 1:
            self.problem(
                raw,
                f"one item holds {' and '.join(f'`{k}`' for k in keywords)}: write each as its own item "
                "of the list (nest one inside the other's `do` to combine them)",
            )
            return []
        keyword = keywords[0]
        for key in body:
            if key not in _ALLOWED[keyword]:
                hint = " (a sugar item is not a task: put the tasks in `do`)" if key not in SUGAR_KEYS else ""
                self.problem(
                    (*raw, key),
                    f"unknown key {describe(key)} in a `{keyword}`: it has "
                    f"{', '.join(_ALLOWED[keyword])}{hint}",
                )
        if label is None or not label:
            self.problem(
                raw,
                f"a `{keyword}` needs `name: <label>`: its generated tasks are labelled after it "
                f"(<name>, <name>.end, ...) so that they stay the same from one version to the next",
            )
            return []
        if keyword == "choose":
            return self.choose(label, body, raw)
        return self.loop(keyword, label, body, raw)

    def gen(
        self,
        name: str,
        target: str | _Next | None,
        raw: Path,
        sugar: str,
        role: str,
        source: Path,
        rules: list[tuple[Any, str | _Next]] | None = None,
        rule_lines: tuple[int, ...] = (),
    ) -> _Out:
        """A generated noop: passes on (``target`` None), jumps to ``target``, or dispatches by
        ``rules`` (``[(when, to)]``, ``when`` None for the else rule)."""
        body: dict[str, Any] = {"name": name, "kind": "noop"}
        if rules is not None:
            body["_rules"] = rules
        elif target is not None:
            body["_rules"] = [(None, target)]
        return _Out(body, raw, self.lines.line(raw), (sugar, role, source), rule_lines)

    def choose(self, label: str, body: dict[str, Any], raw: Path) -> list[_Out]:
        branches = body.get("choose")
        cpath = (*raw, "choose")
        if not isinstance(branches, list) or not branches:
            self.problem(
                cpath,
                "`choose` is a non-empty list of branches: `- when: <condition>` with `do: [...]`, "
                "and optionally a last `- else: {do: [...]}`",
            )
            return []
        parsed: list[tuple[Any, list[Any], Path]] = []  # (when or None for else, do, do path)
        ok = True
        for i, branch in enumerate(branches):
            bpath = (*cpath, i)
            if not isinstance(branch, dict):
                self.problem(
                    bpath,
                    f"a `choose` branch is a mapping `{{when: ..., do: [...]}}`, found {type_name(branch)}",
                )
                ok = False
                continue
            if "else" in branch:
                inner = branch["else"]
                if i != len(branches) - 1:
                    self.problem(bpath, "`else` must be the last branch of a `choose`")
                    ok = False
                extra = [k for k in branch if k != "else"]
                if extra or not isinstance(inner, dict):
                    self.problem(bpath, "the fallback branch is written `- else: {do: [<tasks>]}`")
                    ok = False
                    continue
                for key in inner:
                    if key != "do":
                        self.problem(
                            (*bpath, "else", key), f"unknown key {describe(key)} in `else`: it has do"
                        )
                tasks = self.do_list(inner, (*bpath, "else"), "`else`", empty_ok=True)
                if tasks is None:
                    ok = False
                    continue
                parsed.append((None, tasks, (*bpath, "else", "do")))
                continue
            for key in branch:
                if key not in ("when", "do"):
                    self.problem(
                        (*bpath, key),
                        f"unknown key {describe(key)} in a `choose` branch: it has "
                        "when, do (or else: {do})",
                    )
                    ok = False
            if "when" not in branch:
                self.problem(bpath, "a `choose` branch needs `when: <condition>` (or is the last `- else:`)")
                ok = False
                continue
            if not self.condition(branch["when"], (*bpath, "when"), "when"):
                ok = False
            tasks = self.do_list(branch, bpath, "a `choose` branch", empty_ok=True)
            if tasks is None:
                ok = False
                continue
            parsed.append((branch["when"], tasks, (*bpath, "do")))
        if not ok:
            return []
        end = f"{label}.end"
        has_else = parsed[-1][0] is None
        rules: list[tuple[Any, str | _Next]] = [
            (when, f"{label}.{i}") for i, (when, _, _) in enumerate(parsed) if when is not None
        ]
        rules.append((None, f"{label}.{len(parsed) - 1}" if has_else else end))
        rule_lines = tuple(self.lines.line((*cpath, i)) for i in range(len(parsed)))
        if not has_else:
            rule_lines += (self.lines.line(raw),)
        out = [self.gen(label, None, raw, "choose", "dispatch", raw, rules, rule_lines)]
        for i, (_, tasks, dpath) in enumerate(parsed):
            bpath = (*cpath, i)
            out.append(self.gen(f"{label}.{i}", NEXT, bpath, "choose", "branch", bpath))
            out.extend(self.block(tasks, dpath, top=False))
            if i != len(parsed) - 1:
                out.append(self.gen(f"{label}.{i}.exit", end, bpath, "choose", "exit", bpath))
        out.append(self.gen(end, NEXT, raw, "choose", "merge", raw))
        return out

    def loop(self, keyword: str, label: str, body: dict[str, Any], raw: Path) -> list[_Out]:
        cond = body.get(keyword)
        kpath = (*raw, keyword)
        ok = self.condition(cond, kpath, keyword)
        tasks = self.do_list(body, raw, f"a `{keyword}`", empty_ok=False)
        if not ok or tasks is None:
            return []
        inner = self.block(tasks, (*raw, "do"), top=False)
        if not inner:
            return []
        first = inner[0].body.get("name") if isinstance(inner[0].body, dict) else None
        first = first if isinstance(first, str) else NEXT
        end = f"{label}.end"
        cline = self.lines.line(kpath)
        if keyword == "while":
            test = self.gen(
                label, None, raw, keyword, "test", raw, [(cond, first), (None, end)], (cline, cline)
            )
            back = self.gen(f"{label}.repeat", label, kpath, keyword, "repeat", raw)
            return [test, *inner, back, self.gen(end, NEXT, raw, keyword, "merge", raw)]
        entry = self.gen(label, NEXT, raw, keyword, "entry", raw)
        test = self.gen(
            f"{label}.test", None, kpath, keyword, "test", raw, [(cond, end), (None, first)], (cline, cline)
        )
        return [entry, *inner, test, self.gen(end, NEXT, raw, keyword, "merge", raw)]


def _jump(to: str) -> dict[str, Any]:
    return {"do": "jump", "to": to}


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
