"""Checks for policy rules, shared by task policies and step admission.

Both scopes write rules the same way (``{when, then}``, the fallback as ``{else: {then}}`` or
``{else: null, then}``); only what ``then`` may hold differs, so the shape is read once here and
each scope checks its own ``then``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from noetl.dsl.names import pool_problem
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.yamlload import Path

CONTROL_HINT = "control actions (continue, retry, jump, break, fail) belong only in `task.spec.policy.rules`"


@dataclass(frozen=True)
class RuleParts:
    when: Any  # the ``when`` value as written (None for the else rule)
    then: Any  # the ``then`` value as written (None when missing)
    then_path: Path
    is_else: bool


def read_rule(rule: Any, path: Path, r: Report) -> RuleParts | None:
    """The parts of one rule in either spelling; reports shape problems, None if unusable."""
    if not isinstance(rule, dict):
        r.add(
            path,
            f"a rule is a mapping `{{when: ..., then: {{...}}}}` or `{{else: {{then: {{...}}}}}}`, "
            f"found {type_name(rule)}",
        )
        return None
    for key in rule:
        if key == "expr":
            r.add(
                (*path, key),
                "`expr` is not part of the v10 DSL: the condition of a rule is `when` "
                "(in `spec.policy.rules`)",
            )
        elif key == "do":
            r.add((*path, key), "`do` goes inside `then`: `{when: ..., then: {do: ...}}`")
        elif key not in ("when", "then", "else"):
            r.add(
                (*path, key),
                f"unknown rule key {describe(key)}: a rule has `when` and `then`, or `else: {{then: ...}}`",
            )
    if "else" in rule:
        if "when" in rule:
            r.add(path, "a rule has either `when` or `else`, not both")
        fallback = rule["else"]
        if fallback is None:
            then, then_path = rule.get("then"), (*path, "then")
        elif isinstance(fallback, dict):
            for key in fallback:
                if key != "then":
                    r.add(
                        (*path, "else", key),
                        f"unknown key {describe(key)} in `else`: write `else: {{then: {{...}}}}`",
                    )
            if "then" in rule:
                r.add((*path, "then"), "`then` is given twice: inside `else` and beside it")
            then, then_path = fallback.get("then"), (*path, "else", "then")
        else:
            r.add((*path, "else"), "`else` takes `{then: {...}}` (or write `else: null` beside `then`)")
            return None
        if then is None:
            r.add(then_path, "the `else` rule needs `then: {...}`")
            return None
        return RuleParts(None, then, then_path, True)
    if "when" not in rule:
        r.add(path, "a rule needs `when` (or `else` for the fallback rule)")
    else:
        check_when(rule["when"], (*path, "when"), r)
    if "then" not in rule or rule["then"] is None:
        r.add(path, "a rule needs `then: {...}`")
        return None
    return RuleParts(rule.get("when"), rule["then"], (*path, "then"), False)


def check_when(value: Any, path: Path, r: Report) -> None:
    if not isinstance(value, str | bool):
        r.add(
            path,
            f'`when` is a template string such as "{{{{ ctx.ready }}}}" (or true/false), '
            f"found {type_name(value)}",
        )


def read_rules(rules: Any, path: Path, r: Report) -> list[tuple[Path, RuleParts]]:
    """Every readable rule of a ``rules`` list, with its path; the else rule must come last."""
    if not isinstance(rules, list):
        r.add(path, f"`rules` is a list of `{{when, then}}` rules, found {type_name(rules)}")
        return []
    out: list[tuple[Path, RuleParts]] = []
    for i, rule in enumerate(rules):
        parts = read_rule(rule, (*path, i), r)
        if parts is None:
            continue
        if parts.is_else and i != len(rules) - 1:
            r.add((*path, i), "the `else` rule must be the last rule: rules after it can never match")
        out.append(((*path, i), parts))
    return out


def check_no_control(value: Any, path: Path, scope: str, r: Report) -> None:
    """Report every ``do`` under a non-task scope (step, loop, next, executor specs)."""
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, dict):
            if "do" in node:
                do = node["do"] if isinstance(node["do"], str) else describe(node["do"])
                r.add(
                    (*where, "do"), f"control action `do: {do}` is not allowed in a {scope}: {CONTROL_HINT}"
                )
            stack.extend((v, (*where, k)) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(node))


def contains_control(value: Any) -> bool:
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "do" in node:
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def check_pool(spec: dict[str, Any], path: Path, r: Report) -> None:
    """``spec.pool`` names the subject the step's commands go to: refused here, not at publish."""
    if "pool" in spec:
        problem = pool_problem(spec["pool"])
        if problem:
            r.add((*path, "pool"), problem)
