"""Upstream's task rules and `set`, as this engine writes them (part of upstream.py's translation).

Upstream writes state with `set` ({`ctx.x`: v, `iter.y`: v}) on steps, tasks, rules and arcs, and
treats a `when` over an undefined path as false; here state is written by `set_ctx`/`set_iter`
in a task rule's `then`, and an undefined path in a template is an error. These helpers are
shared by the passes over tasks, steps and joins, so they live apart from any one of them.
"""

from __future__ import annotations

import re
from typing import Any

from noetl.dsl.migrate.core import Migrator
from noetl.dsl.migrate.jinja import inner, wrap
from noetl.dsl.yamlload import Path


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
