"""Upstream's tasks: inputs, shell, auth, output, connection pools, rules and `set` (part of
upstream.py's translation).

A task's `input` becomes `args` for the kinds that take them and is inlined into the templates of
the kinds that do not; every template of the task is renamed once, from the upstream text, before
the migration adds templates of its own.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from noetl.dsl.migrate.jinja import inner
from noetl.dsl.migrate.upstream_detect import UPSTREAM_KINDS
from noetl.dsl.migrate.upstream_facts import SQL
from noetl.dsl.migrate.upstream_names import names_read, rename, shape_renames, strings
from noetl.dsl.migrate.upstream_python_task import UpstreamPython
from noetl.dsl.migrate.upstream_rules import _rules_of, _then_of, add_writes, split_set, undefined_false
from noetl.dsl.yamlload import Path

ARGS_KINDS = ("python", "playbook", "script", "shell")
CREDENTIAL_KIND = {"postgres": "postgres_credential", "http": "http_credential", "duckdb": "secret"}
_SCRIPT_KINDS = {"shell"}
_STORAGE_ONLY = ("store", "inline_max_bytes", "preview_max_bytes", "scope")


class UpstreamTasks(UpstreamPython):
    """The per-task rewrite; the python-specific part is in :class:`UpstreamPython`."""

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
            mine = _d if isinstance(_d := task.get("input"), dict) else {}
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
        kind = task.get("kind")
        acts = self._template_kind(task) if kind == "workbook" else kind  # what the task runs
        loop = isinstance(step.get("loop"), dict)
        spec = (step.get("loop") or {}).get("spec") if loop else None
        parallel = isinstance(spec, dict) and spec.get("mode") == "parallel"
        base = self.base_renames(step)
        inputs = self._task_inputs(task, where, acts, base)
        if kind in _SCRIPT_KINDS:
            self._shell(task, where)
            kind = task.get("kind")
        # the task's own templates, before anything the migration adds
        inline = self._inline_inputs(where, kind, acts, inputs)
        renames = {**base, **inline}
        self._rename_task(task, where, kind, acts, inputs, inline, renames)
        if kind == "workbook" and "task" not in task and isinstance(task.get("name"), str):
            task["task"] = task["name"]
            self.m.did(
                (*where, "name"),
                f"`kind: workbook` names its template by `name` upstream: `task: {task['name']}`",
            )
        if kind == "python":
            self._python(step, task, where)
        self._auth(task, where)
        self._output(task, where)
        self._drop_pools(task, where, kind)
        self._rules(step, task, where, kind, renames, loop=loop, parallel=parallel)
        self._task_set(task, where, kind, renames, loop=loop, parallel=parallel)
        if kind in UPSTREAM_KINDS and kind != "shell":
            self.m.cannot(
                (*where, "kind"),
                f"`kind: {kind}` is an upstream tool this engine does not build: replace the task with "
                "python, http or a sub-playbook that does the same",
            )

    def _task_inputs(self, task: dict[str, Any], where: Path, acts: Any, base: dict[str, str]) -> Any:
        """The task's `input`, renamed, taken off the task: for a kind that takes args the key
        becomes `args` where `input` was (the values are merged in once the task is renamed)."""
        inputs = task.get("input")
        if "input" in task and acts in ARGS_KINDS:
            _put_at(task, "input", "args", (_d if isinstance(_d := task.get("args"), dict) else {}))
        task.pop("input", None)
        if inputs is not None and not isinstance(inputs, dict):
            self.m.cannot(
                (*where, "input"), "task `input` is not a mapping: write it as `input: {name: value}`"
            )
            inputs = None
        return rename(inputs, dict(base)) if inputs else {}

    def _inline_inputs(self, where: Path, kind: Any, acts: Any, inputs: Any) -> dict[str, str]:
        """For a kind without args, what each input name reads as inside the task's templates:
        the input's expression, or its value as a literal."""
        inline: dict[str, str] = {}
        if acts in ARGS_KINDS or not inputs:
            return inline
        for key, value in inputs.items():
            expr = inner(value) if isinstance(value, str) and value.strip().startswith("{{") else None
            text = f"({expr})" if expr is not None else _literal(value)
            if text is None:
                self.m.cannot(
                    (*where, "input", key),
                    f"input `{key}` of a `kind: {kind}` task mixes text and templates: this kind "
                    "takes no inputs, so write the value into the field that reads it",
                )
                continue
            inline[key] = text
            inline[f"input.{key}"] = text
        return inline

    def _rename_task(
        self,
        task: dict[str, Any],
        where: Path,
        kind: Any,
        acts: Any,
        inputs: Any,
        inline: dict[str, str],
        renames: dict[str, str],
    ) -> None:
        """Every template of the task renamed once; the inputs then land in `args`, or (inlined)
        are checked for being read at all, from the text as upstream wrote it."""
        m = self.m
        before_inline = {k: v for k, v in task.items() if k not in ("name", "kind", "spec", "code")}
        before_inline = copy.deepcopy(before_inline)
        for key in list(task):
            if key not in ("code", "name", "kind", "spec", "input", "libs", "script"):
                task[key] = rename(task[key], dict(renames))
        if acts in ARGS_KINDS and inputs:
            args = _d if isinstance(_d := task.get("args"), dict) else {}
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

    def _drop_pools(self, task: dict[str, Any], where: Path, kind: Any) -> None:
        """Upstream's database connection pool settings (in `spec.pool` or `pool`): none here."""
        m = self.m
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

    def _task_set(
        self,
        task: dict[str, Any],
        where: Path,
        kind: Any,
        renames: dict[str, str],
        *,
        loop: bool,
        parallel: bool,
    ) -> None:
        if "set" not in task:
            return
        writes = split_set(
            self.m,
            rename(task.pop("set"), self._outcome_renames(renames, kind)),
            (*where, "set"),
            loop=loop,
            parallel=parallel,
            where="on a task",
        )
        if writes is not None:
            add_writes(task, writes)
            self.m.did(
                (*where, "set"),
                "task `set` became set_ctx/set_iter in the task's rules (after it completes)",
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
