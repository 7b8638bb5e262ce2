"""One step of an older draft, rewritten into the v10 shape.

Order matters: the tool is brought into shape first (a step-level `type`, a bare `tool: http`),
then the names its templates use (`vars`, the bare loop iterator), then the constructs that add
rules or tasks to the pipeline (`eval`, `retry`, `case`, `vars`, `sink`), and last the router,
which may collect arcs from `case`.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.migrate.core import Migrator, Pipeline
from noetl.dsl.migrate.jinja import rewrite_all, wrap
from noetl.dsl.migrate.routing import router, structural, translate_case
from noetl.dsl.migrate.rules import (
    SQL_KINDS,
    add_rules,
    arc_renames,
    eval_rules,
    legacy_rules,
    policy_renames,
    task_renames,
)
from noetl.dsl.yamlload import Path

STEP_ORDER = ("step", "desc", "spec", "loop", "tool", "next")
_STEP_LEVEL = {
    "step",
    "desc",
    "spec",
    "loop",
    "tool",
    "next",
    "args",
    "case",
    "retry",
    "sink",
    "vars",
    "when",
    "expr",
    "eval",
    "type",
    "as",
}
_RENAMED_FIELDS = {
    "http": {"endpoint": "url", "payload": "json"},
    "python": {"with": "args"},
    "playbook": {"with": "args"},
}


def _tool_shape(m: Migrator, step: dict[str, Any], path: Path) -> None:
    """`type: http` or `tool: http` with the tool's fields at step level → `tool: {kind: http, ...}`."""
    kind = step.pop("type", None)
    if isinstance(step.get("tool"), str):
        kind = step.pop("tool")
    if kind is None:
        return
    tool: dict[str, Any] = {}
    m.put(tool, "kind", kind, (*path, "type"))
    for key in [k for k in step if k not in _STEP_LEVEL]:
        m.put(tool, key, step.pop(key), m.origin(step, key))
    m.put(step, "tool", tool, (*path, "tool"))
    m.did((*path, "tool"), f"the step-level tool `{kind}` and its fields moved under `tool` (`kind: {kind}`)")


def _loop(m: Migrator, step: dict[str, Any], path: Path) -> str | None:
    loop = step.get("loop")
    if not isinstance(loop, dict):
        return None
    for key in ("mode", "max_in_flight"):
        if key in loop:
            value = loop.pop(key)
            if key == "mode" and value not in ("sequential", "parallel"):
                m.cannot((*path, "loop", key), f"loop mode {value!r} is not sequential or parallel; dropped")
                continue
            spec = loop.setdefault("spec", {})
            if isinstance(spec, dict):
                m.put(spec, key, value, (*path, "loop", key))
                m.did((*path, "loop", key), f"`loop.{key}` moved to `loop.spec.{key}`")
    iterator = loop.get("iterator")
    return iterator if isinstance(iterator, str) else None


def _task_fields(
    m: Migrator, label: str, task: dict[str, Any], path: Path, iterator: str | None, kind: str | None
) -> list[dict[str, Any]]:
    """Fix one task's fields; returns the rules its `eval`/`retry` become (for the caller to add)."""
    for old, new in _RENAMED_FIELDS.get(str(task.get("kind")), {}).items():
        if old in task and new not in task:
            m.put(task, new, task.pop(old), m.origin(task, old))
            m.did((*path, old), f"`{old}` of a {task.get('kind')} task is spelled `{new}`")
    if "timeout" in task and isinstance(task["timeout"], int | float | dict):
        spec = task.setdefault("spec", {})
        m.put(spec, "timeout", task.pop("timeout"), m.origin(task, "timeout"))
        m.did((*path, "timeout"), "a task's `timeout` is a knob: it moved to `spec.timeout`")
    for key, value in list(task.items()):
        if key not in ("code", "name", "kind", "eval", "expr", "retry", "when", "spec"):
            task[key] = rewrite_all(value, task_renames(m, iterator))
    policy = (task.get("spec") or {}).get("policy") if isinstance(task.get("spec"), dict) else None
    if isinstance(policy, dict):
        rewrite_all(policy.get("rules"), policy_renames(m, kind, iterator))
    rules: list[dict[str, Any]] = []
    if "eval" in task:
        rules = eval_rules(m, task.pop("eval"), (*path, "eval"), policy_renames(m, kind, iterator))
        m.did((*path, "eval"), "`eval` became `spec.policy.rules` (`expr` → `when`, directives under `then`)")
    if "retry" in task:
        rules += legacy_rules(m, task.pop("retry"), (*path, "retry"), kind, iterator)
        m.did((*path, "retry"), "`retry` became a task rule with `do: retry`")
    for key in ("case", "vars", "sink"):
        if key in task:
            task.pop(key)
            m.cannot((*path, key), f"`{key}` on a task (not on a step) has no v10 form; dropped")
    return rules


def _gate_task(m: Migrator, pipe: Pipeline, label: str, test: str, skip: dict[str, Any]) -> dict[str, Any]:
    """A noop that takes ``skip`` when ``test`` (a lone ``{{ expr }}``) is false, else continues."""
    when = wrap(f"not ({test.strip()[2:-2].strip()})") if test.strip().startswith("{{") else "{{ false }}"
    return {
        "name": pipe.unique(f"{label}_gate"),
        "kind": "noop",
        "spec": {
            "policy": {
                "rules": [
                    {"when": when, "then": m.flow(skip)},
                    {"else": {"then": m.flow({"do": "continue"})}},
                ]
            }
        },
    }


def _gate(m: Migrator, pipe: Pipeline, j: int, label: str, cond: Any, path: Path) -> None:
    """A task `when`: a noop before it that jumps past it when the condition is false."""
    labels = pipe.labels()
    test = rewrite_all(cond, task_renames(m, None)) if isinstance(cond, str) else "{{ true }}"
    if m.sugar:
        _choose_gate(m, pipe, j, label, str(test), path)
        return
    skip: dict[str, Any] = {"do": "jump", "to": labels[j + 1]} if j + 1 < len(labels) else {"do": "break"}
    gate = _gate_task(m, pipe, label, str(test), skip)
    pipe.insert(j, gate, (*path, "when"))
    m.did(
        (*path, "when"),
        f"a task `when` became the noop task `{gate['name']}` before it, which jumps past "
        f"`{label}` when the condition is false",
    )


def _choose_gate(m: Migrator, pipe: Pipeline, j: int, label: str, test: str, path: Path) -> None:
    """``--sugar``: a task `when` becomes a one-branch `choose` around the task, which reads as
    the draft did; it compiles to the same gate the canonical output spells out."""
    tasks = pipe._as_list()
    origin = m.origin(tasks, j)
    do: list[Any] = []
    m.put(do, None, tasks[j], origin)
    branch = {"when": test, "do": do}
    choose: list[Any] = []
    m.put(choose, None, branch, (*path, "when"))
    name = pipe.unique(f"{label}_when")
    m.put(tasks, j, {"name": name, "choose": choose}, origin)
    m.did(
        (*path, "when"),
        f"a task `when` became the `choose` `{name}` around `{label}` (--sugar), which runs it only "
        "when the condition is true",
    )


def _pipeline(m: Migrator, step: dict[str, Any], path: Path, pipe: Pipeline, iterator: str | None) -> None:
    tool = step.get("tool")
    base = (*path, "tool")
    gates: list[tuple[str, Any, Path]] = []
    for j, (label, task) in enumerate(pipe.bodies()):
        where = base if isinstance(tool, dict) else (*base, j)
        if isinstance(tool, list) and isinstance(tool[j], dict) and tool[j] is not task:
            where = (*where, label)
        rules = _task_fields(m, label, task, where, iterator, task.get("kind"))
        add_rules(m, task, rules, [])
        for key in ("when", "expr"):
            if key in task:
                gates.append((label, task.pop(key), (*where, key)))
    for label, cond, where in gates:
        _gate(m, pipe, pipe.labels().index(label), label, cond, where[:-1])


def _admission(m: Migrator, step: dict[str, Any], path: Path) -> None:
    for key in ("when", "expr"):
        if key not in step:
            continue
        cond = step.pop(key)
        if cond is True or (isinstance(cond, str) and cond.replace(" ", "") in ("{{true}}", "true")):
            m.did((*path, key), f"step `{key}` that is always true: dropped")
            continue
        cond = rewrite_all(cond, arc_renames(m)) if isinstance(cond, str) else cond
        rules = [
            {"when": cond, "then": m.flow({"allow": True})},
            {"else": {"then": m.flow({"allow": False})}},
        ]
        spec = step.setdefault("spec", {})
        policy = spec.setdefault("policy", {})
        m.put(policy, "admit", {"rules": rules}, (*path, key))
        m.did(
            (*path, key),
            f"step `{key}` became admission (`spec.policy.admit`): a token is skipped when false",
        )


def _vars(m: Migrator, step: dict[str, Any], path: Path, pipe: Pipeline, iterator: str | None) -> None:
    values = step.pop("vars")
    if not isinstance(values, dict):
        m.cannot((*path, "vars"), "`vars` that is not a mapping")
        return
    bodies = pipe.bodies()
    kind = bodies[-1][1].get("kind") if bodies else None
    values = rewrite_all(values, policy_renames(m, kind, iterator))
    label = pipe.unique("save_vars")
    task = {
        "name": label,
        "kind": "noop",
        "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue", "set_ctx": values}}}]}},
    }
    pipe.insert(None, task, (*path, "vars"))
    extra = " (`result[0]` of a SQL task is `outcome.result.rows[0]`)" if kind in SQL_KINDS else ""
    m.did(
        (*path, "vars"),
        f"`vars` became `set_ctx` in the noop task `{label}` after the pipeline, which "
        f"sees the step's result as `outcome.result`{extra}; read them as `ctx.<name>`",
    )


def _sink(m: Migrator, pipe: Pipeline, sink: Any, cond: str | None, path: Path, iterator: str | None) -> None:
    if not isinstance(sink, dict):
        m.cannot(path, f"`sink: {sink!r}` is a placeholder, not a sink: nothing to translate")
        return
    body = (
        dict(sink["tool"])
        if isinstance(sink.get("tool"), dict)
        else {k: v for k, v in sink.items() if k != "args"}
    )
    if "kind" not in body:
        m.cannot(path, "a sink without a tool `kind`")
        return
    renames = {"result": "_prev", "this": "_prev", "response": "_prev", **task_renames(m, iterator)}
    label = pipe.unique("sink")
    task: dict[str, Any] = {"name": label, **rewrite_all(body, renames)}
    raw_args = sink.get("args")
    args = rewrite_all(raw_args, renames) if isinstance(raw_args, dict) else None
    if body.get("kind") in SQL_KINDS:
        _sql_sink(m, task, args, path)
    elif args is not None:
        task["args"] = args
    if cond is not None:
        pipe.insert(None, _gate_task(m, pipe, label, cond.strip(), {"do": "break"}), path)
    pipe.insert(None, task, path)
    how = "a task that writes and returns a reference"
    m.did(
        path,
        f"`sink` became the task `{label}` at the end of the pipeline ({how}); the step's result is "
        "now the sink's result, and the sink's inputs read the previous result as `_prev`",
    )


def _sql_sink(m: Migrator, task: dict[str, Any], args: dict[str, Any] | None, path: Path) -> None:
    """A SQL sink names a table and the row (`args`); a v10 SQL task runs a statement with `params`,
    and reads no `table` or `args` (validation rejects them), so the row becomes an INSERT."""
    table = task.pop("table", None)
    kind = task["kind"]
    if any(k in task for k in ("command", "query")):
        if args is not None and kind == "duckdb":
            task["params"] = args  # `$name` placeholders read a mapping
        elif args is not None:
            m.cannot(
                path,
                f"the {kind} sink's `args` were dropped: a {kind} statement reads its values from "
                "`params` (a list for $1..$n); pass them there",
            )
        return
    if isinstance(table, str) and table and args:
        columns = list(args)
        marks = ", ".join(f"${i}" for i in range(1, len(columns) + 1))
        task["command"] = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        task["params"] = [args[c] for c in columns]
        m.did(path, f"the {kind} sink's table and `args` became an INSERT `command` with `params`")
        return
    named = f"the table `{table}`" if isinstance(table, str) and table else "a table"
    m.cannot(path, f"the {kind} sink names {named} but no statement: write the INSERT as `command`")


def _placeholders(m: Migrator, step: dict[str, Any], path: Path) -> None:
    """The specs' sketches write `loop: ...`, `tool: ...`: a placeholder is no construct."""
    for key in [k for k, v in step.items() if v == "..." and k not in ("step", "desc")]:
        step.pop(key)
        m.cannot((*path, key), f"`{key}: ...` is a placeholder in the example, not a {key}: dropped")


def translate_step(m: Migrator, step: dict[str, Any], path: Path) -> dict[str, Any]:
    _placeholders(m, step, path)
    _tool_shape(m, step, path)
    iterator = _loop(m, step, path)
    loop = isinstance(step.get("loop"), dict)
    pipe = Pipeline(m, step)
    _pipeline(m, step, path, pipe, iterator if loop else None)
    r = structural(m, step, path, loop)
    bodies = pipe.bodies()
    last = bodies[-1][1] if bodies else None
    kind = last.get("kind") if last else None
    front: list[dict[str, Any]] = []
    if "eval" in step:
        front += eval_rules(m, step.pop("eval"), (*path, "eval"), policy_renames(m, kind, iterator))
        m.did((*path, "eval"), "a step's `eval` became `spec.policy.rules` of its last task")
    if "retry" in step:
        front += legacy_rules(m, step.pop("retry"), (*path, "retry"), kind, iterator)
        m.did((*path, "retry"), "`retry` became task rules with `do: retry` (and error → fail after them)")
    work = translate_case(m, step, path, pipe, loop, iterator, r) if "case" in step else None
    back = work.rules if work else []
    if (front or back) and last is None:
        last = {"name": pipe.unique("actions"), "kind": "noop"}
        pipe.insert(None, last, (*path, "case"))
    if last is not None:
        add_rules(m, last, front, back)
    if work and work.init:
        init = {
            "name": pipe.unique("init"),
            "kind": "noop",
            "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue", "set_ctx": work.init}}}]}},
        }
        pipe.insert(0, init, work.init_origin)
        m.did(
            work.init_origin,
            f"`set` on step.enter became the first task `{init['name']}`"
            + (" (it runs at the start of every iteration)" if loop else ""),
        )
    _admission(m, step, path)
    if "vars" in step:
        _vars(m, step, path, pipe, iterator if loop else None)
    if "sink" in step:
        _sink(m, pipe, step.pop("sink"), None, (*path, "sink"), iterator if loop else None)
    for sink, cond, at in work.sinks if work else []:
        _sink(m, pipe, sink, cond, at, iterator if loop else None)
    router(m, step, path, r)
    args = step.pop("args", None)
    if args:
        m.cannot(
            (*path, "args"),
            "step-level `args` has no v10 form: a step's inputs are the `args` of the "
            "arcs that reach it; move them there (dropped here)",
        )
    for key in [k for k in step if k not in STEP_ORDER]:
        step.pop(key)
        m.cannot((*path, key), f"step key `{key}` has no v10 form; dropped")
    if not step.get("tool") and "next" not in step:
        m.put(step, "tool", m.flow({"kind": "noop"}), None)
        m.did(path, "a step left with neither tool nor next got `tool: {kind: noop}`")
    return m.reorder(step, STEP_ORDER)
