"""The compiler of authoring sugar (``noetl.dsl.sugar``): one pipeline's `choose`, `while` and
`until` items turned into canonical tasks with stable labels, each generated path remembered with
the sugar it came from (the debug map and the line map)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl.dsl.errors import Problem
from noetl.dsl.report import describe, type_name
from noetl.dsl.yamlload import LineMap, Path, fmt_path

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
            good, entry = self._choose_branch(branch, (*cpath, i), i == len(branches) - 1)
            ok = ok and good
            if entry is not None:
                parsed.append(entry)
        if not ok:
            return []
        return self._choose_tasks(label, raw, cpath, parsed)

    def _choose_branch(
        self, branch: Any, bpath: Path, last: bool
    ) -> tuple[bool, tuple[Any, list[Any], Path] | None]:
        """One branch, checked: whether it is well formed, and (when) its tasks could be read,
        (when, do, do path); every problem is reported, not only the first."""
        if not isinstance(branch, dict):
            self.problem(
                bpath,
                f"a `choose` branch is a mapping `{{when: ..., do: [...]}}`, found {type_name(branch)}",
            )
            return False, None
        if "else" in branch:
            return self._choose_else(branch, bpath, last)
        ok = True
        for key in branch:
            if key not in ("when", "do"):
                self.problem(
                    (*bpath, key),
                    f"unknown key {describe(key)} in a `choose` branch: it has when, do (or else: {{do}})",
                )
                ok = False
        if "when" not in branch:
            self.problem(bpath, "a `choose` branch needs `when: <condition>` (or is the last `- else:`)")
            return False, None
        if not self.condition(branch["when"], (*bpath, "when"), "when"):
            ok = False
        tasks = self.do_list(branch, bpath, "a `choose` branch", empty_ok=True)
        if tasks is None:
            return False, None
        return ok, (branch["when"], tasks, (*bpath, "do"))

    def _choose_else(
        self, branch: dict[str, Any], bpath: Path, last: bool
    ) -> tuple[bool, tuple[Any, list[Any], Path] | None]:
        ok = True
        inner = branch["else"]
        if not last:
            self.problem(bpath, "`else` must be the last branch of a `choose`")
            ok = False
        extra = [k for k in branch if k != "else"]
        if extra or not isinstance(inner, dict):
            self.problem(bpath, "the fallback branch is written `- else: {do: [<tasks>]}`")
            return False, None
        for key in inner:
            if key != "do":
                self.problem((*bpath, "else", key), f"unknown key {describe(key)} in `else`: it has do")
        tasks = self.do_list(inner, (*bpath, "else"), "`else`", empty_ok=True)
        if tasks is None:
            return False, None
        return ok, (None, tasks, (*bpath, "else", "do"))

    def _choose_tasks(
        self, label: str, raw: Path, cpath: Path, parsed: list[tuple[Any, list[Any], Path]]
    ) -> list[_Out]:
        """The checked branches as tasks: a dispatch, each branch's block, a merge point."""
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
