"""Upstream NoETL's dialect of `noetl.io/v2`, translated into this engine's canonical playbooks.

Upstream's playbooks look like this engine's (`tool`, `next.arcs`, `spec.policy.rules`) but
mean some things differently, and the differences are silent: a template that reads
`{{ api_url }}` renders here as an error, not as the workload's value. So the translation is
construct by construct, each with the same meaning (docs/migrate.md has the table):

- names: workload keys as bare names → `workload.<key>`; a step's result by the step's name →
  `ctx.<step>` (the step keeps its result there, by a `set_ctx` the migration adds, when a later
  step reads it); a bare loop iterator → `iter.<name>`; `output` in rules → `outcome`
  (`output.data` is `outcome.result`); result shapes (http `status_code`/`body`, postgres
  `command_N`) → this engine's;
- inputs: a task's `input` → `args` for the kinds that take them, and inlined into the
  templates of the kinds that do not; a step's `input` → each of its tasks' inputs;
- state: `set` on a step, a task, a rule's `then` or an arc → `set_ctx`/`set_iter` in task rules
  (an arc's `set` travels in the arc's `args` to a first task of its target);
- python: `libs`, the preloaded modules, `context`, `input_data`, `main` parameters filled from
  the context, a top-level `return`, `script:` → the code and `args` this engine runs;
- routing: a leaf step routes to `end` when there is one; a step reached from several branches
  of an inclusive fan-out is a barrier (it runs once, after all of them): an admission join;
- `auth: name` without a `keychain` entry → the entry is declared; `else` without `then`;
  `when` over an undefined path is false (`| default(false)`).

What has no translation is refused (a note with `untranslated`, which `noetl migrate` turns into
exit 2), never dropped silently.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path as FsPath
from typing import Any

from noetl.dsl.migrate.core import Migrator, Pipeline
from noetl.dsl.migrate.jinja import inner, rewrite, wrap
from noetl.dsl.migrate.routing import router, structural
from noetl.dsl.migrate.steps import _loop, _tool_shape
from noetl.dsl.migrate.upstream_detect import UPSTREAM_KINDS
from noetl.dsl.migrate.upstream_names import (
    NAMESPACES,
    StepFacts,
    names_read,
    rename,
    shape_renames,
    statement_count,
    strings,
    unreachable_commands,
)
from noetl.dsl.migrate.upstream_python import (
    decode_b64,
    has_top_level_return,
    libs_imports,
    main_params,
    preloaded_used,
    read_script,
    wrap_in_main,
)
from noetl.dsl.yamlload import Path

ARGS_KINDS = ("python", "playbook", "script", "shell")
SQL = ("postgres", "duckdb", "snowflake")
CREDENTIAL_KIND = {"postgres": "postgres_credential", "http": "http_credential", "duckdb": "secret"}
_SCRIPT_KINDS = {"shell"}
_STORAGE_ONLY = ("store", "inline_max_bytes", "preview_max_bytes", "scope")


# ---- small helpers ---------------------------------------------------------------------------


def _rules_of(task: dict[str, Any]) -> list[Any] | None:
    spec = task.get("spec")
    policy = spec.get("policy") if isinstance(spec, dict) else None
    rules = policy.get("rules") if isinstance(policy, dict) else None
    return rules if isinstance(rules, list) else None


def _then_of(rule: dict[str, Any]) -> dict[str, Any] | None:
    if isinstance(rule.get("else"), dict):
        then = rule["else"].get("then")
        return then if isinstance(then, dict) else None
    then = rule.get("then")
    return then if isinstance(then, dict) else None


def add_writes(task: dict[str, Any], writes: dict[str, dict[str, Any]]) -> None:
    """``writes`` ({"set_ctx": {...}, "set_iter": {...}}) on every rule of ``task`` after which
    its pipeline goes on or ends well (`continue`, `break`), and on a fallback `else`: what
    upstream does after the task or step completes."""
    writes = {k: v for k, v in writes.items() if v}
    if not writes:
        return
    spec = task.setdefault("spec", {})
    policy = spec.setdefault("policy", {})
    rules = policy.get("rules")
    if not isinstance(rules, list) or not rules:
        policy["rules"] = [
            {"when": "{{ outcome.status == 'error' }}", "then": {"do": "fail"}},
            {"else": {"then": {"do": "continue", **_copy(writes)}}},
        ]
        return
    has_else = False
    for rule in rules:
        if not isinstance(rule, dict):
            continue
        has_else = has_else or "else" in rule
        then = _then_of(rule)
        if then is not None and then.get("do", "continue") in ("continue", "break"):
            for key, values in writes.items():
                merged = dict(then.get(key) or {})
                merged.update(values)
                then[key] = merged
    if not has_else and policy.get("on_unmatched", "continue") == "continue":
        rules.append({"else": {"then": {"do": "continue", **_copy(writes)}}})


def _copy(writes: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {k: dict(v) for k, v in writes.items()}


def split_set(
    m: Migrator, values: Any, path: Path, *, loop: bool, parallel: bool, where: str
) -> dict[str, dict[str, Any]] | None:
    """Upstream `set` ({`ctx.x`: v, `iter.y`: v, `step.z`: v} or nested {ctx: {x: v}}) as
    {"set_ctx": ..., "set_iter": ...}; None (and a refusal) when a key has no home here."""
    if not isinstance(values, dict):
        m.cannot(path, f"`set` {where} is not a mapping: write it as `set: {{ctx.<name>: <value>}}`")
        return None
    out: dict[str, dict[str, Any]] = {"set_ctx": {}, "set_iter": {}}
    flat: list[tuple[str, Any]] = []
    for key, value in values.items():
        if key in ("ctx", "iter", "step", "vars") and isinstance(value, dict):
            flat += [(f"{key}.{k}", v) for k, v in value.items()]
        else:
            flat.append((str(key), value))
    for key, value in flat:
        scope, _, name = key.partition(".")
        if not name:
            scope, name = "ctx", key
        if scope in ("ctx", "vars", "step"):
            if scope == "step":
                m.did(path, f"`step.{name}` (upstream's step-run scope) is kept in ctx as `ctx.{name}`")
            out["set_ctx"][name] = value
        elif scope == "iter":
            if not loop:
                m.cannot(
                    (*path, key),
                    f"`set` {where} writes `iter.{name}` in a step without a loop: there is no iteration "
                    f"scope here; write `ctx.{name}` instead",
                )
                return None
            out["set_iter"][name] = value
        else:
            out["set_ctx"][key] = value
    if parallel and out["set_ctx"]:
        keys = ", ".join(sorted(out["set_ctx"]))
        m.cannot(
            path,
            f"`set` {where} writes ctx ({keys}) from a parallel loop: concurrent writes race here; "
            "declare how they combine in `loop.spec.policy.reducers` or write `iter.*`",
        )
        return None
    return out


# ---- the pass --------------------------------------------------------------------------------


class Upstream:
    """One playbook's translation; :meth:`run` rewrites ``doc`` in place."""

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
                    args = (_d if isinstance(_d := task.get("args"), dict) else {})
                    given = set(args) | set(task.get("input") or {})
                    reads |= {p for p in params if p in others and p not in given}
            self.captured |= reads

    # -- tasks ----------------------------------------------------------------------------

    def _inputs(self, step: dict[str, Any], path: Path) -> None:
        """A step's `input` is every task's input (the task's own entries win)."""
        if "input" not in step:
            return
        values = step.pop("input")
        if not isinstance(values, dict):
            self.m.cannot(
                (*path, "input"), "step `input` is not a mapping: write it as `input: {name: value}`"
            )
            return
        for _, task, _ in self._tasks(step, path):
            mine = (_d if isinstance(_d := task.get("input"), dict) else {})
            task["input"] = {**values, **mine}
        if not step.get("tool"):
            self.m.cannot(
                (*path, "input"),
                "step `input` on a step without tasks reads nothing: pass the values in the `args` of "
                "the arcs that reach the step",
            )
            return
        self.m.did((*path, "input"), "step `input` became each of its tasks' inputs")

    def _task(self, step: dict[str, Any], path: Path, label: str, task: dict[str, Any], where: Path) -> None:
        m = self.m
        kind = task.get("kind")
        acts = self._template_kind(task) if kind == "workbook" else kind  # what the task runs
        loop = isinstance(step.get("loop"), dict)
        spec = (step.get("loop") or {}).get("spec") if loop else None
        parallel = isinstance(spec, dict) and spec.get("mode") == "parallel"
        base = self.base_renames(step)
        inputs = task.get("input")
        if "input" in task and acts in ARGS_KINDS:
            _put_at(task, "input", "args", (_d if isinstance(_d := task.get("args"), dict) else {}))
        task.pop("input", None)
        if inputs is not None and not isinstance(inputs, dict):
            m.cannot((*where, "input"), "task `input` is not a mapping: write it as `input: {name: value}`")
            inputs = None
        inputs = rename(inputs, dict(base)) if inputs else {}
        if kind in _SCRIPT_KINDS:
            self._shell(task, where)
            kind = task.get("kind")
        # the task's own templates, before anything the migration adds
        inline: dict[str, str] = {}
        if acts not in ARGS_KINDS and inputs:
            for key, value in inputs.items():
                expr = inner(value) if isinstance(value, str) and value.strip().startswith("{{") else None
                text = f"({expr})" if expr is not None else _literal(value)
                if text is None:
                    m.cannot(
                        (*where, "input", key),
                        f"input `{key}` of a `kind: {kind}` task mixes text and templates: this kind "
                        "takes no inputs, so write the value into the field that reads it",
                    )
                    continue
                inline[key] = text
                inline[f"input.{key}"] = text
        renames = {**base, **inline}
        before_inline = {k: v for k, v in task.items() if k not in ("name", "kind", "spec", "code")}
        before_inline = copy.deepcopy(before_inline)
        for key in list(task):
            if key not in ("code", "name", "kind", "spec", "input", "libs", "script"):
                task[key] = rename(task[key], dict(renames))
        if acts in ARGS_KINDS and inputs:
            args = (_d if isinstance(_d := task.get("args"), dict) else {})
            task["args"] = {**args, **inputs}
            m.did((*where, "input"), f"task `input` became the `args` of the `kind: {kind}` task")
        elif inline:
            unread = sorted(set(inputs) - names_read(before_inline, set(inputs)) - _input_refs(before_inline))
            for key in unread:
                m.cannot(
                    (*where, "input", key),
                    f"input `{key}` of a `kind: {kind}` task is read by none of its fields, and this kind "
                    "takes no inputs: write the value into the field the tool reads (`params`, `json`, ...)",
                )
            m.did(
                (*where, "input"),
                f"task `input` was inlined into the templates of the `kind: {kind}` task (this kind "
                "takes no inputs)",
            )
        if kind == "workbook" and "task" not in task and isinstance(task.get("name"), str):
            task["task"] = task["name"]
            m.did(
                (*where, "name"),
                f"`kind: workbook` names its template by `name` upstream: `task: {task['name']}`",
            )
        if kind == "python":
            self._python(step, task, where)
        self._auth(task, where)
        self._output(task, where)
        spec = task.get("spec")
        if kind in SQL and isinstance(spec, dict) and isinstance(spec.get("pool"), dict):
            spec.pop("pool")
            m.did(
                (*where, "spec", "pool"),
                f"`spec.pool` with settings on a {kind} task is upstream's database connection pool: "
                "this engine opens the connection per task run, so it was removed (the worker pool, a "
                "step's `spec.pool`, is another thing)",
            )
        if "pool" in task and kind in SQL:
            task.pop("pool")
            m.did(
                (*where, "pool"),
                f"`pool` of a {kind} task is upstream's database connection pool: this engine opens "
                "the connection per task run (no pool settings), so it was removed; the worker pool is "
                "another thing (a step's `spec.pool`)",
            )
        self._rules(step, task, where, kind, renames, loop=loop, parallel=parallel)
        if "set" in task:
            writes = split_set(
                m,
                rename(task.pop("set"), self._outcome_renames(renames, kind)),
                (*where, "set"),
                loop=loop,
                parallel=parallel,
                where="on a task",
            )
            if writes is not None:
                add_writes(task, writes)
                m.did(
                    (*where, "set"),
                    "task `set` became set_ctx/set_iter in the task's rules (after it completes)",
                )
        if kind in UPSTREAM_KINDS and kind != "shell":
            m.cannot(
                (*where, "kind"),
                f"`kind: {kind}` is an upstream tool this engine does not build: replace the task with "
                "python, http or a sub-playbook that does the same",
            )

    def _template_kind(self, task: dict[str, Any]) -> str | None:
        book = self.doc.get("workbook")
        tasks = book.get("tasks") if isinstance(book, dict) else None
        ref = task.get("task", task.get("name"))
        template = tasks.get(ref) if isinstance(tasks, dict) and isinstance(ref, str) else None
        kind = template.get("kind") if isinstance(template, dict) else None
        return kind if isinstance(kind, str) else None

    def _shell(self, task: dict[str, Any], where: Path) -> None:
        task["kind"] = "script"
        for key in ("cmds", "commands"):
            if isinstance(task.get(key), list):
                task["script"] = "\n".join(str(c) for c in task.pop(key))
        if isinstance(task.get("cmd"), str | list):
            task["command"] = task.pop("cmd")
        self.m.did(
            (*where, "kind"),
            "`kind: shell` became `kind: script` (SEMANTICS §22; its result is {exit_code, stdout, "
            "stderr}; workers refuse it where NOETL_ALLOW_SCRIPT=false)",
        )

    def _outcome_renames(self, renames: dict[str, str], kind: Any) -> dict[str, str]:
        out = dict(renames)
        k = kind if isinstance(kind, str) else None
        out.update(shape_renames("output.data", "outcome.result", k, 1))
        out.update(shape_renames("output.result", "outcome.result", k, 1))
        out["output"] = "outcome"
        out["result"] = "outcome.result"
        return out

    def _rules(
        self,
        step: dict[str, Any],
        task: dict[str, Any],
        where: Path,
        kind: Any,
        renames: dict[str, str],
        *,
        loop: bool,
        parallel: bool,
    ) -> None:
        rules = _rules_of(task)
        if rules is None:
            return
        m = self.m
        read_output = re.search(r"(?<![\w.])output\.", " ".join(strings(rules))) is not None
        outcome = self._outcome_renames(renames, kind)
        outcome.pop("result")  # `result` in a rule is no upstream name
        for n, rule in enumerate(rules):
            at = (*where, "spec", "policy", "rules", n)
            if not isinstance(rule, dict):
                continue
            if isinstance(rule.get("else"), dict) and "then" not in rule["else"] and "then" not in rule:
                body = rule.pop("else")
                rule["else"] = {"then": body}
                m.did((*at, "else"), "`else` without `then` became `else: {then: ...}`")
            if "when" in rule:
                before = rule["when"]
                rule["when"] = undefined_false(rename(before, dict(outcome)))
            then = _then_of(rule)
            if then is None:
                continue
            for key in list(then):
                if key != "set":
                    then[key] = rename(then[key], dict(outcome))
            if "set" in then:
                writes = split_set(
                    m,
                    rename(then.pop("set"), dict(outcome)),
                    (*at, "then", "set"),
                    loop=loop,
                    parallel=parallel,
                    where="in a rule",
                )
                if writes is not None:
                    for key, values in writes.items():
                        if values:
                            then[key] = {**(then.get(key) or {}), **values}
                    m.did((*at, "then", "set"), "rule `then.set` became set_ctx/set_iter")
            for key in ("set_ctx", "set_iter"):
                if isinstance(then.get(key), dict):
                    then[key] = {
                        k.split(".", 1)[1] if k.startswith(f"{key[4:]}.") else k: v
                        for k, v in then[key].items()
                    }
        if read_output:
            m.did(
                (*where, "spec", "policy", "rules"),
                "`output` in task rules became `outcome` (`output.data` is `outcome.result`)",
            )

    def _python(self, step: dict[str, Any], task: dict[str, Any], where: Path) -> None:
        m = self.m
        code = task.get("code")
        if "script" in task:
            src, what = read_script(task["script"], self.base)
            if src is None or isinstance(code, str):
                m.cannot(
                    (*where, "script"),
                    f"python `script`: {what}; migrate cannot bring it in: paste the source into `code`"
                    if src is None
                    else "python has both `script` and `code`: keep one, in `code`",
                )
            else:
                task.pop("script")
                code = task["code"] = src
                m.did((*where, "script"), f"python `script` ({what}) became the task's `code`")
        decoded = decode_b64(task)
        if decoded is not None:
            task.pop("code_b64", None)
            task.pop("code_base64", None)
            code = task["code"] = decoded
            m.did((*where, "code_b64"), "base64 `code_b64` was decoded into `code`")
        if not isinstance(code, str):
            return
        args = (_d if isinstance(_d := task.get("args"), dict) else {})
        if "input_data" in task:
            args["input_data"] = rename(task.pop("input_data"), self.base_renames(step))
            m.did(
                (*where, "input_data"),
                "python `input_data` became the input `args.input_data` (the code reads it as `input_data`)",
            )
        if isinstance(task.get("libs"), list):
            listed = task.pop("libs")
            m.did(
                (*where, "libs"),
                f"python `libs` given as a list ({', '.join(map(str, listed))}) is ignored upstream (its "
                "worker imports only a mapping alias: module): removed; install the packages on the worker",
            )
        if "libs" in task:
            lines, problem = libs_imports(task["libs"])
            if problem:
                m.cannot((*where, "libs"), f"python {problem}: write the imports at the top of `code`")
            else:
                task.pop("libs")
                code = "\n".join(lines) + "\n" + code
                m.did(
                    (*where, "libs"),
                    f"python `libs` became imports at the top of `code` ({'; '.join(lines)})",
                )
        pre = preloaded_used(code)
        if pre:
            code = f"import {', '.join(pre)}\n" + code
            m.did(
                (*where, "code"), f"upstream preloads {', '.join(pre)} for python code: imported at the top"
            )
        params = main_params(code)
        needs_context = re.search(r"(?<![\w.])context\b", code) is not None and "context" not in args
        if params is not None:
            for p in params:
                if p in args or p == "context" or p.startswith("_"):
                    continue
                source = self._resolve(step, p)
                if source is not None:
                    args[p] = source
                    m.did(
                        (*where, "code"),
                        f"`main` parameter `{p}` (upstream fills it from the context) "
                        f"is passed as `args.{p}: {source}`",
                    )
            needs_context = needs_context and "context" in params
        if needs_context:
            args["context"] = self._context()
            m.did(
                (*where, "code"),
                "the code reads upstream's `context`: passed as `args.context` "
                "(workload keys, `workload`, `ctx`, `execution_id`)",
            )
        if has_top_level_return(code):
            code = wrap_in_main(code, list(args))
            m.did((*where, "code"), "the code returns at the top level: wrapped into `def main(**_args)`")
        if args or "args" in task:
            task["args"] = args
        task["code"] = code

    def _resolve(self, step: dict[str, Any], name: str) -> str | None:
        if name == self._iterator(step):
            return f"{{{{ iter.{name} }}}}"
        if name in self.captured and name != step.get("step"):
            return f"{{{{ ctx.{name} }}}}"
        if name in self.workload:
            return f"{{{{ workload.{name} }}}}"
        return None

    def _context(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: f"{{{{ workload.{k} }}}}" for k in sorted(self.workload)}
        out.update(workload="{{ workload }}", ctx="{{ ctx }}", execution_id="{{ execution_id }}")
        return out

    def _auth(self, task: dict[str, Any], where: Path) -> None:
        if (
            "auth" not in task
            and isinstance(task.get("credential"), str)
            and task.get("kind") in (*SQL, "http")
        ):
            _put_at(task, "credential", "auth", task["credential"])
            self.m.did(
                (*where, "credential"), "`credential` (upstream's name for the connection) became `auth`"
            )
        auth = task.get("auth")
        name = None
        if isinstance(auth, str) and "{{" not in auth:
            name = auth
        elif isinstance(auth, dict):
            ref = auth.get("credential", auth.get("key", auth.get("name")))
            if isinstance(ref, str) and set(auth) <= {"type", "credential", "key", "name", "kind"}:
                task["auth"] = name = ref
                self.m.did((*where, "auth"), f"`auth: {{type, credential: {ref}}}` became `auth: {ref}`")
        if name is not None:
            kind = task.get("kind")
            self.auth.setdefault(name, CREDENTIAL_KIND.get(str(kind), f"{kind}_credential"))

    def _output(self, task: dict[str, Any], where: Path) -> None:
        out = task.get("output")
        if not isinstance(out, dict):
            return
        task.pop("output")
        storage = [k for k in out if k in _STORAGE_ONLY]
        other = [k for k in out if k not in _STORAGE_ONLY]
        if storage:
            self.m.did(
                (*where, "output"),
                f"task `output` ({', '.join(storage)}) says where upstream stores the result: here a "
                "large result goes to the object store by itself (SEMANTICS §11); removed",
            )
        if other:
            self.m.cannot(
                (*where, "output"),
                f"task `output.{other[0]}` (result selection or accumulation) has no translation: "
                "shape the result in the task (a python step, or set_ctx in a rule)",
            )

    # -- steps ----------------------------------------------------------------------------

    def _step_output(self, step: dict[str, Any], path: Path) -> None:
        if "output" not in step:
            return
        value = step.pop("output")
        tasks = self._tasks(step, path)
        if isinstance(value, dict) and tasks:
            last = tasks[-1][1]
            last["output"] = value
            self._output(last, (*path, "output"))
        else:
            self.m.cannot(
                (*path, "output"),
                "step `output` has no translation here: shape the step's result in its last task",
            )

    def _step_set(self, step: dict[str, Any], path: Path) -> None:
        for key, scope in (("set_ctx", "ctx"), ("set_iter", "iter")):  # upstream's older spelling
            if isinstance(step.get(key), dict):
                values = step.pop(key)
                merged = (_d if isinstance(_d := step.get("set"), dict) else {})
                step["set"] = {**merged, **{f"{scope}.{k}": v for k, v in values.items()}}
        if "set" not in step:
            return
        m = self.m
        tasks = self._tasks(step, path)
        loop = isinstance(step.get("loop"), dict)
        spec = (step.get("loop") or {}).get("spec") if loop else None
        parallel = isinstance(spec, dict) and spec.get("mode") == "parallel"
        own = str(step.get("step"))
        f = self.facts[own]
        renames = self.base_renames(step)
        renames.update(self._outcome_renames({}, f.kind))
        renames.update(shape_renames(own, "outcome.result", f.kind, f.statements))
        values = rename(step.pop("set"), renames)
        if loop:
            m.did((*path, "set"), "a loop step's `set` runs after each iteration here (in its last task)")
        writes = split_set(m, values, (*path, "set"), loop=loop, parallel=parallel, where="on a step")
        if writes is None:
            return
        if not tasks:
            step["tool"] = [{"name": "set", "kind": "noop"}]
            tasks = self._tasks(step, path)
        add_writes(tasks[-1][1], writes)
        m.did(
            (*path, "set"),
            f"step `set` became set_ctx/set_iter in the rules of its last task "
            f"`{tasks[-1][0]}` (the step's result is `outcome.result` there)",
        )

    def _capture(self, step: dict[str, Any], path: Path) -> None:
        own = str(step.get("step"))
        if own not in self.captured:
            return
        tasks = self._tasks(step, path)
        value = "{{ outcome.result | default(none) }}"
        if isinstance(step.get("loop"), dict):
            loop = step["loop"]
            spec = loop.setdefault("spec", {})
            policy = spec.setdefault("policy", {})
            policy.setdefault("reducers", {})[own] = "append"
            how = "each iteration's result is appended (in completion order for a parallel loop)"
        else:
            how = "its result"
        add_writes(tasks[-1][1], {"set_ctx": {own: value}})
        self.m.did(path, f"later steps read `{own}` by name: {how} is kept as `ctx.{own}`")

    def _arcs(self, step: dict[str, Any], path: Path) -> None:
        nxt = step.get("next")
        arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
        if not isinstance(arcs, list):
            return
        own = str(step.get("step"))
        f = self.facts[own]
        renames = self.base_renames(step, iterator=False)
        renames.update(shape_renames(own, "event.result", f.kind, f.statements))
        renames.update(shape_renames("output.data", "event.result", f.kind, f.statements))
        renames.update(
            {
                "output.result": "event.result",
                "output.error": "event.error",
                "output.status": "('error' if event.name == 'step.failed' else 'ok')",
                "output": "event",
            }
        )
        done = "loop.done" if f.loop else "step.done"
        events = {"call.done": done, "step.exit": done, "call.error": "step.failed"}
        for k, arc in enumerate(arcs):
            if not isinstance(arc, dict):
                continue
            at = (*path, "next", "arcs", k)
            for key in ("when", "args"):
                if key in arc:
                    arc[key] = rename(arc[key], dict(renames))
            if isinstance(arc.get("when"), str):
                when = rewrite(
                    arc["when"], {}, lambda e: f"event.name == '{events[e]}'" if e in events else None
                )
                if when != arc["when"]:
                    self.m.did(
                        (*at, "when"),
                        "upstream's events in an arc (`call.done`, `call.error`, "
                        f"`step.exit`) are this engine's `{done}` / `step.failed`",
                    )
                arc["when"] = undefined_false(when)
            if "set" in arc:
                self._arc_set(arc, at, rename(arc.pop("set"), dict(renames)))

    def _arc_set(self, arc: dict[str, Any], at: Path, values: Any) -> None:
        m = self.m
        target = next((s for s in self.steps if s.get("step") == arc.get("step")), None)
        if target is None:
            m.cannot(
                at,
                f"arc `set` toward `{arc.get('step')}`, which is not a step: set it in the "
                "source step's `set` instead",
            )
            return
        writes = split_set(m, values, (*at, "set"), loop=False, parallel=False, where="on an arc")
        if writes is None:
            return
        if isinstance(target.get("loop"), dict):
            m.cannot(
                (*at, "set"),
                f"arc `set` into the loop step `{target['step']}`: its first task runs "
                "once per iteration here; move the `set` to the source step's `set`",
            )
            return
        args = (_d if isinstance(_d := arc.get("args"), dict) else {})
        args["_set"] = writes["set_ctx"]
        arc["args"] = args
        keys = self._pending_sets.setdefault(str(target["step"]), [])
        keys.extend(k for k in writes["set_ctx"] if k not in keys)
        m.did(
            (*at, "set"),
            f"arc `set` travels in the arc's `args._set`; the first task of "
            f"`{target['step']}` writes it to ctx",
        )

    def _apply_arc_sets(self) -> None:
        for step in self.steps:
            keys = self._pending_sets.get(str(step.get("step")))
            if not keys:
                continue
            pipe = Pipeline(self.m, step)
            incoming = [
                a
                for s in self.steps
                for a in ((s.get("next") or {}).get("arcs") or [] if isinstance(s.get("next"), dict) else [])
                if isinstance(a, dict) and a.get("step") == step.get("step")
            ]
            values = {}
            for k in keys:
                every = all(k in ((a.get("args") or {}).get("_set") or {}) for a in incoming)
                values[k] = (
                    f"{{{{ args._set.{k} }}}}"
                    if every and k.isidentifier()
                    else f"{{{{ args._set[{k!r}] if args._set is defined and {k!r} in args._set "
                    f"else ctx[{k!r}] | default(none) }}}}"
                )
            task = {
                "name": pipe.unique("arc_set"),
                "kind": "noop",
                "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue", "set_ctx": values}}}]}},
            }
            if not step.get("tool"):
                step["tool"] = [task]
            else:
                pipe.insert(0, task, None)

    def _when_admit_loop(self, step: dict[str, Any]) -> None:
        base = self.base_renames(step, iterator=False)
        loop = step.get("loop")
        if isinstance(loop, dict) and "in" in loop:
            loop["in"] = rename(loop["in"], dict(base))
        spec = step.get("spec")
        policy = spec.get("policy") if isinstance(spec, dict) else None
        admit = policy.get("admit") if isinstance(policy, dict) else None
        if isinstance(admit, dict) and isinstance(admit.get("rules"), list):
            for rule in admit["rules"]:
                if isinstance(rule, dict) and "when" in rule:
                    rule["when"] = undefined_false(rename(rule["when"], dict(base)))
                if (
                    isinstance(rule, dict)
                    and isinstance(rule.get("else"), dict)
                    and "then" not in rule["else"]
                ):
                    rule["else"] = {"then": rule["else"]}

    # -- routing --------------------------------------------------------------------------

    def _to_end(self) -> None:
        names = {s.get("step") for s in self.steps}
        if "end" not in names:
            return
        for step in self.steps:
            if step.get("step") == "end" or step.get("next"):
                continue
            step["next"] = {"arcs": [self.m.flow({"step": "end"})]}
            self.m.did(
                self.paths[id(step)],
                f"the leaf step `{step.get('step')}` routes to `end` "
                "implicitly upstream: the arc is written out",
            )

    def _targets(self, step: dict[str, Any]) -> list[str]:
        nxt = step.get("next")
        arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
        return [a["step"] for a in arcs or [] if isinstance(a, dict) and isinstance(a.get("step"), str)]

    def _barriers(self) -> None:
        by_name = {str(s.get("step")): s for s in self.steps}
        preds: dict[str, list[str]] = {}
        for s in self.steps:
            for t in self._targets(s):
                if str(s.get("step")) not in preds.setdefault(t, []):
                    preds[t].append(str(s.get("step")))

        def reach(start: str) -> set[str]:
            seen, todo = set(), [start]
            while todo:
                n = todo.pop()
                if n in seen or n not in by_name:
                    continue
                seen.add(n)
                todo += self._targets(by_name[n])
            return seen

        for fan in self.steps:
            nxt = fan.get("next")
            mode = (nxt.get("spec") or {}).get("mode") if isinstance(nxt, dict) else None
            targets = self._targets(fan)
            if mode != "inclusive" or len(set(targets)) < 2:
                continue
            branches = [reach(t) for t in dict.fromkeys(targets)]
            # a predecessor on one branch only: the branches meet at the join (steps after the
            # meeting point are on every branch, and alternatives there are no barrier)
            own = [b - set().union(*(o for o in branches if o is not b)) for b in branches]
            for join, ps in preds.items():
                if join not in by_name or len(ps) < 2:
                    continue
                inside = [p for p in ps if any(p in o for o in own)]
                if len({n for n, o in enumerate(own) for p in inside if p in o}) < 2:
                    continue
                self._join(by_name[join], [by_name[p] for p in inside], str(fan.get("step")))

    def _join(self, join: dict[str, Any], preds: list[dict[str, Any]], fan: str) -> None:
        m = self.m
        name = str(join.get("step"))
        spec = join.setdefault("spec", {})
        policy = spec.setdefault("policy", {})
        if "_joined_" in str(policy.get("admit")):
            return  # the join this migration wrote before: migrating again changes nothing
        if "admit" in policy:
            m.cannot(
                self.paths[id(join)],
                f"`{name}` joins the branches of `{fan}` (upstream: a barrier) "
                "and has its own admission: combine them by hand (admit when every branch's flag is set)",
            )
            return
        flags = []
        for p in preds:
            flag = f"_joined_{name}_{p.get('step')}"
            flags.append(flag)
            tasks = self._tasks(p, self.paths[id(p)])
            if not tasks:
                p["tool"] = [{"name": "arrived", "kind": "noop"}]
                tasks = self._tasks(p, self.paths[id(p)])
            if isinstance(p.get("loop"), dict):
                lspec = p["loop"].setdefault("spec", {})
                lspec.setdefault("policy", {}).setdefault("reducers", {})[flag] = "max"
                add_writes(tasks[-1][1], {"set_ctx": {flag: 1}})
            else:
                add_writes(tasks[-1][1], {"set_ctx": {flag: True}})
        test = " and ".join(f"ctx.{f} | default(false)" for f in flags)
        policy["admit"] = {
            "rules": [
                {"when": wrap(test), "then": m.flow({"allow": True})},
                {"else": {"then": m.flow({"allow": False})}},
            ]
        }
        m.did(
            self.paths[id(join)],
            f"`{name}` is reached from several branches of the inclusive fan-out at "
            f"`{fan}`: upstream runs it once, after all of them (a barrier); it admits only when each "
            f"branch has arrived ({', '.join(str(p.get('step')) for p in preds)} set a flag)",
        )

    def _keychain(self) -> None:
        if not self.auth:
            return
        keychain = self.doc.get("keychain")
        if keychain is None:
            keychain = self.doc["keychain"] = []
        if not isinstance(keychain, list):
            self.m.cannot(("keychain",), "`keychain` is not a list: write it as `[{name, kind}]`")
            return
        declared = {e.get("name") for e in keychain if isinstance(e, dict)}
        for name, kind in self.auth.items():
            if name not in declared:
                keychain.append(self.m.flow({"name": name, "kind": kind}))
                self.m.did(
                    ("keychain",),
                    f"`auth: {name}` names a credential the playbook does not declare: "
                    f"added `{{name: {name}, kind: {kind}}}` to `keychain` (the server checks it exists "
                    "before the workflow starts)",
                )

    # -- all of it ------------------------------------------------------------------------

    def _workbook(self) -> None:
        """Upstream's `workbook` is a list of named tasks (`- name: x, kind: python, ...`, or the
        older `tool: python`); here it is `workbook.tasks` keyed by name."""
        book = self.doc.get("workbook")
        if not isinstance(book, list):
            return
        tasks: dict[str, Any] = {}
        for n, entry in enumerate(book):
            name = entry.get("name", entry.get("task")) if isinstance(entry, dict) else None
            if not isinstance(name, str):
                self.m.cannot(("workbook", n), "a `workbook` entry without a `name`: name it")
                continue
            body = {
                k: v for k, v in entry.items() if k not in ("name", "task", "desc", "description", "assert")
            }
            tool = body.pop("tool", None)
            if isinstance(tool, dict):
                body = {**tool, **body}
            elif isinstance(tool, str) and "kind" not in body:
                body = {"kind": tool, **body}
            if "type" in body and "kind" not in body:
                body = {"kind": body.pop("type"), **body}
            tasks[name] = body
        self.doc["workbook"] = {"tasks": tasks}
        self.m.did(("workbook",), "`workbook` as a list of named tasks became `workbook.tasks` keyed by name")

    def _loop_knobs(self, step: dict[str, Any], path: Path) -> None:
        loop = step.get("loop")
        spec = loop.get("spec") if isinstance(loop, dict) else None
        if not isinstance(spec, dict):
            return
        if spec.get("mode") == "cursor":
            self.m.cannot(
                (*path, "loop", "spec", "mode"),
                "loop `cursor` mode (upstream claims rows from a cursor as it goes) has no translation: "
                "page with a `jump` rule and `set_iter` (docs/examples/pagination.yaml), or loop over "
                "a claimed list",
            )
        value = spec.get("max_in_flight")
        if isinstance(value, str) and "{{" in value:
            key = inner(value)
            known = key.removeprefix("workload.")
            default = (self.doc.get("workload") or {}).get(known) if known.isidentifier() else None
            if isinstance(default, int) and not isinstance(default, bool):
                spec["max_in_flight"] = default
                self.m.did(
                    (*path, "loop", "spec", "max_in_flight"),
                    f"templated `max_in_flight` became the workload's value {default} (a spec is not "
                    "rendered here; a payload that changes it no longer does)",
                )
            else:
                self.m.cannot(
                    (*path, "loop", "spec", "max_in_flight"),
                    "a templated `max_in_flight` has no translation (a spec is not rendered here): "
                    "write a number",
                )

    def run(self) -> None:
        """The order matters: structure first (so tasks and arcs are where they will be), then the
        facts the names depend on (which step results are read later), then every template is
        renamed once, from the upstream text, before the migration adds templates of its own."""
        self._pending_sets: dict[str, list[str]] = {}
        self._workbook()
        for step in self.steps:
            self._shape(step, self.paths[id(step)])
            self._loop_knobs(step, self.paths[id(step)])
        self._facts()
        for step in self.steps:
            self._inputs(step, self.paths[id(step)])
        self._find_captures()
        self._name_notes()
        for step in self.steps:
            path = self.paths[id(step)]
            for label, task, where in self._tasks(step, path):
                self._task(step, path, label, task, where)
            self._step_output(step, path)
            self._when_admit_loop(step)
            self._arcs(step, path)
        for step in self.steps:
            path = self.paths[id(step)]
            self._step_set(step, path)
            self._capture(step, path)
        self._apply_arc_sets()
        self._to_end()
        self._barriers()
        self._keychain()
        self._check_commands()
        self._check_env()

    def _check_env(self) -> None:
        for step in self.steps:
            text = " ".join(strings({k: v for k, v in step.items() if k not in ("step", "desc")}))
            for region in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", text, re.S):
                for name in sorted(set(re.findall(r"(?<![\w.])env\.(\w+)", region))):
                    self.m.cannot(
                        self.paths[id(step)],
                        f"`env.{name}`: upstream's templates read the process environment, this engine's "
                        "cannot (they are sandboxed): put the value in the workload or the request payload",
                    )

    def _check_commands(self) -> None:
        for name, f in self.facts.items():
            if f.kind not in SQL:
                continue
            for step in self.steps:
                text = " ".join(strings({k: v for k, v in step.items() if k != "step"}))
                for prefix in (f"ctx.{name}", "event.result" if step.get("step") == name else None):
                    if prefix is None:
                        continue
                    for path in unreachable_commands(text, prefix, f.statements):
                        self.m.cannot(
                            self.paths[id(step)],
                            f"`{path.replace(prefix, name, 1)}` reads the rows of statement "
                            f"{path.rsplit('_', 1)[1]} of `{name}`; a SQL task's result here is its last "
                            "statement's: split the statements into tasks, each with its own label",
                        )


_WHEN_BARE = re.compile(r"^[\w.\[\]'\" ]+$")


def undefined_false(when: Any) -> Any:
    """Upstream's `when` over an undefined path is false; here a template whose value is
    undefined is an error, so a condition that can end on a bare path gets `| default(false)`."""
    if not isinstance(when, str) or "default(" in when:
        return when
    expr = inner(when)
    if expr == when.strip() or expr in ("true", "false"):
        return when
    if (_WHEN_BARE.match(expr) and not re.search(r"\s(==|!=|in|is)\s", expr)) or re.search(
        r"\b(and|or)\b", expr
    ):
        return wrap(f"({expr}) | default(false)")
    return when


def _input_refs(value: Any) -> set[str]:
    """Keys read as `input.<key>` in the templates of ``value``."""
    return {m.group(1) for text in strings(value) for m in re.finditer(r"(?<![\w.])input\.(\w+)", text)}


def _put_at(mapping: dict[str, Any], old: str, new: str, value: Any) -> None:
    """``mapping`` with ``old`` replaced by ``new`` (holding ``value``) where ``old`` was: the
    translated playbook reads in the order its author wrote it."""
    items = [(new, value) if k == old else (k, v) for k, v in mapping.items() if k != new or k == old]
    mapping.clear()
    mapping.update(items)


def _literal(value: Any) -> str | None:
    """``value`` as a Jinja literal (None when it holds a template: that is no literal)."""
    if isinstance(value, str):
        return None if "{{" in value or "{%" in value else json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        items = [_literal(v) for v in value]
        return None if None in items else "[" + ", ".join(str(i) for i in items) + "]"
    if isinstance(value, dict):
        pairs = [(json.dumps(str(k)), _literal(v)) for k, v in value.items()]
        return (
            None if any(v is None for _, v in pairs) else "{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}"
        )
    return None


def translate_upstream(m: Migrator, doc: dict[str, Any]) -> None:
    """Rewrite ``doc`` (an upstream playbook) in place into canonical form; notes on ``m``."""
    if not isinstance(doc.get("workflow"), list):
        m.cannot(("workflow",), "no `workflow` list: nothing to migrate")
        return
    Upstream(m, doc).run()
