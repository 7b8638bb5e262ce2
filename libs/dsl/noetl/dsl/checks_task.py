"""Checks for a step's pipeline: labels, tasks, task policies and their directives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeGuard

from noetl.dsl import legacy
from noetl.dsl.checks_fields import check_fields, template_of
from noetl.dsl.checks_rules import read_rules
from noetl.dsl.kinds import kind_model, known_kinds
from noetl.dsl.knobs import check_task_spec, task_policy_misplaced
from noetl.dsl.model import DO_VALUES
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.shapes import TaskEntry
from noetl.dsl.task_models import spec_knobs
from noetl.dsl.yamlload import Path, fmt_path

# template namespaces a label would hide (SEMANTICS §3); names starting with `_` are reserved too
RESERVED_LABELS = frozenset(
    {"workload", "ctx", "iter", "args", "keychain", "outcome", "event", "execution_id"}
)
POLICY_KEYS = ("rules", "on_unmatched", "mode", "before", "after", "finally")
HOOKS = ("before", "after", "finally")
THEN_KEYS = ("do", "attempts", "backoff", "delay", "max_delay", "to", "set_ctx", "set_iter")
BACKOFFS = ("none", "fixed", "linear", "exponential")
DO_LIST = ", ".join(DO_VALUES)
LOOP_MODES = ("sequential", "parallel")


@dataclass(frozen=True)
class PipelineContext:
    """What a task check needs to know about its surroundings."""

    workbook: dict[str, Any] = field(default_factory=dict)  # workbook.tasks, when well-formed
    parallel: bool = False  # the step's loop runs iterations at once
    reducers: frozenset[str] = frozenset()  # ctx keys with a reducer (loop.spec.policy.reducers)
    in_loop: bool | None = None  # the step has a loop; None where unknown (a workbook template)


def check_pipeline(entries: list[TaskEntry], ctx: PipelineContext, r: Report) -> None:
    seen: dict[str, Path] = {}
    for e in entries:
        r.lines.alias(e.path, e.raw)
        if e.problem is not None or e.body is None:
            r.add(e.path, e.problem or "not a task")
            continue
        if e.label is None:
            r.add(
                (*e.path, "name"), f"a task name is a non-empty string, found {type_name(e.body.get('name'))}"
            )
            continue
        if e.labelled and "name" in e.body and e.body["name"] != e.label:
            r.add(
                (*e.path, "name"),
                f"task labelled {e.label!r} also has name {describe(e.body['name'])}: keep one of them",
            )
        if e.label in seen:
            r.add(
                e.path,
                f"duplicate task label {e.label!r} in this pipeline (first at {fmt_path(seen[e.label])}): "
                "labels must be unique within a step's `tool` list",
            )
        else:
            seen[e.label] = e.path
        if e.label in RESERVED_LABELS:
            r.add(
                e.path, f"task label {e.label!r} shadows the template namespace `{e.label}`: rename the task"
            )
        elif e.label.startswith("_"):
            r.add(
                e.path,
                f"task label {e.label!r} starts with `_`, which is reserved for pipeline locals "
                "(_prev, _task, _attempt): rename the task",
            )
    labels = frozenset(seen)
    for e in entries:
        if e.body is not None and e.problem is None:
            check_task(e.body, e.path, labels, ctx, r)


def check_task(
    body: dict[str, Any],
    path: Path,
    labels: frozenset[str] | None,
    ctx: PipelineContext,
    r: Report,
    *,
    in_workbook: bool = False,
) -> None:
    """One task; ``labels`` is None for a workbook template (its jumps resolve where it is used)."""
    kinds = known_kinds()
    kind = body.get("kind")
    if "kind" not in body:
        r.add(path, f"a task needs `kind: <kind>` (known kinds: {', '.join(sorted(kinds))})")
    elif not isinstance(kind, str) or kind not in kinds:
        r.add(
            (*path, "kind"), f"unknown task kind {describe(kind)}: known kinds are {', '.join(sorted(kinds))}"
        )
    for key, message in legacy.TASK_KEYS.items():
        if key in body:
            r.add((*path, key), message)
    spec = body.get("spec")
    if spec is not None and not isinstance(spec, dict):
        r.add((*path, "spec"), f"a task `spec` is a mapping of knobs and `policy`, found {type_name(spec)}")
    elif isinstance(spec, dict):
        runs_as = _runs_as(body, ctx.workbook, in_workbook)
        check_task_spec(spec, (*path, "spec"), runs_as, spec_knobs(kind_model(runs_as)), r)
        if "policy" in spec:
            check_task_policy(spec["policy"], (*path, "spec", "policy"), labels, ctx, r)
    check_fields(body, path, ctx.workbook, r, template=in_workbook)
    if kind == "workbook":
        _check_workbook_ref(body, path, labels, ctx, r, in_workbook)


def _runs_as(body: dict[str, Any], workbook: dict[str, Any], in_workbook: bool) -> str:
    """The kind a task runs as: a workbook reference runs as its template's kind."""
    kind = body.get("kind")
    if kind == "workbook" and not in_workbook:
        found = template_of(body, workbook)
        if found is not None:
            return str(found[1]["kind"])
    return kind if isinstance(kind, str) else ""


def _check_workbook_ref(
    body: dict[str, Any],
    path: Path,
    labels: frozenset[str] | None,
    ctx: PipelineContext,
    r: Report,
    in_workbook: bool,
) -> None:
    if in_workbook:
        r.add((*path, "kind"), "a workbook task cannot itself be `kind: workbook`")
        return
    name = body.get("task")
    if not isinstance(name, str) or not name:
        r.add((*path, "task"), "`kind: workbook` needs `task: <name of an entry of workbook.tasks>`")
    elif name not in ctx.workbook:
        have = ", ".join(sorted(ctx.workbook)) or "none"
        r.add((*path, "task"), f"workbook task {name!r} does not exist (workbook.tasks has: {have})")
    elif not _has_own_rules(body):  # the template's rules decide after this task
        thens = _template_thens(ctx.workbook[name])
        racing = sorted(
            {str(k) for then in thens if isinstance(then.get("set_ctx"), dict) for k in then["set_ctx"]}
            - ctx.reducers
        )
        if ctx.parallel and racing:
            r.add(
                path,
                f"workbook task {name!r} writes `set_ctx` key(s) {', '.join(racing)} without a reducer, "
                "which is not allowed in a step whose loop is `parallel` (iterations would race): declare "
                "them in `loop.spec.policy.reducers`, use `set_iter`, or make the loop sequential",
            )
        if ctx.in_loop is False and any("set_iter" in then for then in thens):
            r.add(
                path,
                f"workbook task {name!r} writes `set_iter` (workbook.tasks.{name}.spec.policy), and this "
                "step has no `loop`: `iter` exists only inside a loop iteration; give this task a "
                "`spec.policy` of its own, or call the template from a loop step",
            )
        for then in thens:
            to = then.get("to")
            if then.get("do") == "jump" and isinstance(to, str) and labels is not None and to not in labels:
                have = ", ".join(sorted(labels)) or "none"
                r.add(
                    (*path, "task"),
                    f"workbook task {name!r} jumps to {to!r} (workbook.tasks.{name}.spec.policy), which is "
                    f"not a task label in this pipeline (labels: {have}): label a task {to!r} here, "
                    "or give this task a `spec.policy` of its own",
                )


def _has_own_rules(body: dict[str, Any]) -> bool:
    spec = body.get("spec")
    return isinstance(spec, dict) and isinstance(spec.get("policy"), dict) and "rules" in spec["policy"]


def _template_thens(template: Any) -> list[dict[str, Any]]:
    """The ``then`` of every rule of a workbook template's own policy (else-rules included)."""
    if not isinstance(template, dict) or not _has_own_rules(template):
        return []
    rules = template["spec"]["policy"]["rules"]
    out = []
    for rule in rules if isinstance(rules, list) else []:
        if not isinstance(rule, dict):
            continue
        fallback = rule.get("else")
        then = fallback.get("then") if isinstance(fallback, dict) else rule.get("then")
        if isinstance(then, dict):
            out.append(then)
    return out


def check_task_policy(
    policy: Any, path: Path, labels: frozenset[str] | None, ctx: PipelineContext, r: Report
) -> None:
    if not isinstance(policy, dict):
        r.add(path, f"task `spec.policy` is a mapping with `rules`, found {type_name(policy)}")
        return
    for key in policy:
        if key not in POLICY_KEYS:
            misplaced = task_policy_misplaced(key)
            r.add(
                (*path, key),
                f"{misplaced}, not in a task's `spec.policy`"
                if misplaced
                else f"unknown key {describe(key)} in task `spec.policy`: it has {', '.join(POLICY_KEYS)}",
            )
    if "rules" not in policy:
        r.add(
            path,
            "task `spec.policy` needs `rules`: a list of `{when: ..., then: {do: ...}}` rules "
            "(`- else: {then: {do: continue}}` for a default)",
        )
    else:
        for _, parts in read_rules(policy["rules"], (*path, "rules"), r):
            check_then(parts.then, parts.then_path, labels, ctx, r)
    if "on_unmatched" in policy and policy["on_unmatched"] not in ("continue", "fail"):
        r.add(
            (*path, "on_unmatched"),
            f"`on_unmatched` is `continue` or `fail`, found {describe(policy['on_unmatched'])}",
        )
    if "mode" in policy and policy["mode"] != "exclusive":
        loop = " (a loop's mode goes in the step's `loop.spec.mode`)" if policy["mode"] in LOOP_MODES else ""
        r.add(
            (*path, "mode"),
            f"task policy `mode` is `exclusive` (the first matching rule wins), found "
            f"{describe(policy['mode'])}{loop}",
        )
    for hook in HOOKS:
        if policy.get(hook) not in (None, []):
            r.add(
                (*path, hook),
                f"`{hook}` is a reserved hook list and must be empty: put the work in a task of the pipeline",
            )


def check_then(then: Any, path: Path, labels: frozenset[str] | None, ctx: PipelineContext, r: Report) -> None:
    if not isinstance(then, dict):
        r.add(path, f"`then` is a mapping such as `{{do: continue}}`, found {type_name(then)}")
        return
    for key in then:
        if key in legacy.THEN_KEYS:
            r.add((*path, key), legacy.THEN_KEYS[key])
        elif key not in THEN_KEYS:
            r.add(
                (*path, key),
                f"unknown key {describe(key)} in a task rule's `then`: it has {', '.join(THEN_KEYS)}",
            )
    do = then.get("do", "continue")
    if not isinstance(do, str) or do not in DO_VALUES:
        r.add((*path, "do"), f"`then.do` {describe(do)} is not a directive: use one of {DO_LIST}")
    if do == "jump":
        _check_jump(then, path, labels, r)
    elif "to" in then:
        r.add((*path, "to"), "`to` is only used with `do: jump`")
    _check_retry_knobs(then, path, r)
    for key in ("set_ctx", "set_iter"):
        if key in then and not isinstance(then[key], dict):
            r.add((*path, key), f"`{key}` is a mapping of names to values, found {type_name(then[key])}")
    own = then.get("set_iter")
    if ctx.in_loop is False and "set_iter" in then:
        r.add(
            (*path, "set_iter"),
            "`set_iter` in a step without `loop`: `iter` exists only inside a loop iteration, so the write "
            "would go nowhere; keep a value for the later tasks of this run with `set_ctx`, or read an "
            "earlier task's result by its label (`{{ <label> }}`)",
        )
    for key in own if isinstance(own, dict) else ():
        if str(key).split(".", 1)[0] == "parent":
            r.add(
                (*path, "set_iter", key),
                "`iter.parent` is the calling loop iteration's `iter` (a child playbook started from a loop "
                "iteration) and is read-only: write the value under another name",
            )
    writes = then.get("set_ctx")
    racing = []
    if ctx.parallel and isinstance(writes, dict):
        racing = [str(k) for k in writes if k not in ctx.reducers]
    if racing:
        r.add(
            (*path, "set_ctx"),
            f"`set_ctx` of {', '.join(racing)} in a step whose loop is `parallel`: parallel iterations "
            f"would race on ctx; declare how writes combine in `loop.spec.policy.reducers` "
            f"(e.g. `reducers: {{{racing[0]}: sum}}`), keep per-iteration state in `set_iter`, or make "
            "the loop sequential",
        )


def _check_jump(then: dict[str, Any], path: Path, labels: frozenset[str] | None, r: Report) -> None:
    to = then.get("to")
    if "to" not in then:
        r.add(path, "`do: jump` needs `to: <task label>` (a task of the same pipeline)")
    elif not isinstance(to, str):
        r.add((*path, "to"), f"`to` is a task label, found {type_name(to)}")
    elif labels is not None and to not in labels:
        have = ", ".join(sorted(labels)) or "none"
        r.add(
            (*path, "to"),
            f"jump target {to!r} is not a task label in this pipeline (labels: {have}): "
            "a jump stays inside its step's `tool` list",
        )


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_retry_knobs(then: dict[str, Any], path: Path, r: Report) -> None:
    attempts = then.get("attempts")
    if "attempts" in then and not (
        isinstance(attempts, str)
        or (isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 1)
    ):
        r.add(
            (*path, "attempts"),
            f"`attempts` is a whole number of runs, at least 1 (the first run "
            f"included), found {describe(attempts)}",
        )
    if "backoff" in then and then["backoff"] not in BACKOFFS:
        r.add(
            (*path, "backoff"),
            f"`backoff` is one of {', '.join(BACKOFFS)}, found {describe(then['backoff'])}",
        )
    for key in ("delay", "max_delay"):
        value = then.get(key)
        if key in then and not (isinstance(value, str) or (_is_number(value) and value >= 0)):
            r.add(
                (*path, key),
                f"`{key}` is a number of seconds (0 or more) or a template, found {describe(value)}",
            )
