"""What the older drafts' conditions and actions become in a v10 task policy or router.

Legacy templates name things by where they were evaluated (`response`, `result`, `error`,
`this`, `event.name == 'call.done'`); in v10 the same facts have one name per place: a task rule
sees `outcome`, an arc sees `event`, a task sees `_prev`. The rename maps and event maps here
say what each legacy name becomes in each place.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.migrate.core import Migrator
from noetl.dsl.migrate.jinja import EventMap, rewrite, rewrite_all
from noetl.dsl.yamlload import Path

ERROR_TEST = "{{ outcome.status == 'error' }}"
HTTP_STATUS = {
    "error.status": "outcome.http.status",
    "error.status_code": "outcome.http.status",
    "response.status_code": "outcome.http.status",
    "response.status": "outcome.http.status",
    "status_code": "outcome.http.status",
    "response.headers": "outcome.http.headers",
}
SQL_KINDS = ("postgres", "duckdb")


def policy_renames(m: Migrator, kind: str | None, iterator: str | None) -> dict[str, str]:
    out = {
        "response": "outcome.result",
        "result": "outcome.result",
        "error": "outcome.error",
        "this": "outcome",
        "_retry.index": "_attempt",
        **m.var_renames,
    }
    if kind == "http":
        out.update(HTTP_STATUS)
    if kind in SQL_KINDS:
        out["result"] = "outcome.result.rows"
    if iterator:
        out[iterator] = f"iter.{iterator}"
    return out


def task_renames(m: Migrator, iterator: str | None) -> dict[str, str]:
    out = {"_retry.index": "_attempt", **m.var_renames}
    if iterator:
        out[iterator] = f"iter.{iterator}"
    return out


def arc_renames(m: Migrator) -> dict[str, str]:
    return {
        "response": "event.result",
        "result": "event.result",
        "error": "event.error",
        "this": "event",
        **m.var_renames,
    }


def policy_events(name: str) -> str | None:
    """A legacy event tested in a task rule: the rule runs after the call, before the step ends."""
    return {
        "call.done": "true",
        "step.exit": "true",
        "step.enter": "false",
        "call.error": "outcome.status == 'error'",
    }.get(name)


def arc_events(loop: bool) -> EventMap:
    done = "event.name == 'loop.done'" if loop else "event.name == 'step.done'"

    def events(name: str) -> str | None:
        return {
            "step.exit": done,
            "call.done": done if loop else "event.name in ['step.done', 'step.failed']",
            "call.error": "event.name == 'step.failed'",
            "step.enter": "false",
        }.get(name)

    return events


def retry_then(m: Migrator, then: Any, path: Path) -> dict[str, Any] | None:
    """`{max_attempts, initial_delay, backoff_multiplier}` → `{do: retry, attempts, delay, backoff}`."""
    if not isinstance(then, dict):
        then = {"max_attempts": then} if isinstance(then, int) else {}
    for key in ("next_call", "collect", "sink", "call"):
        if key in then:
            m.cannot(
                (*path, key),
                f"success-driven retry with `{key}` (pagination, polling with new "
                "inputs) has no v10 retry form: write it as set_iter + a `jump` back (SEMANTICS §6)",
            )
            return None
    out: dict[str, Any] = {"do": "retry"}
    attempts = then.get("max_attempts", then.get("attempts"))
    if attempts is not None:
        out["attempts"] = attempts
    delay = then.get("initial_delay", then.get("delay"))
    if delay is not None:
        out["delay"] = delay
    factor = then.get("backoff_multiplier")
    if isinstance(factor, int | float) and not isinstance(factor, bool):
        out["backoff"] = "fixed" if factor == 1 else "exponential"
        if factor not in (1, 2):
            m.did(
                (*path, "backoff_multiplier"),
                f"backoff_multiplier {factor} became `backoff: exponential`, "
                "which doubles the delay each retry",
            )
    elif then.get("backoff") in ("none", "fixed", "linear", "exponential"):
        out["backoff"] = then["backoff"]
    for key in ("max_delay",):
        if key in then:
            out[key] = then[key]
    return m.flow(out)


def legacy_rules(
    m: Migrator, retry: Any, path: Path, kind: str | None, iterator: str | None
) -> list[dict[str, Any]]:
    """A step's `retry` (a list of `{when, then}` policies, or one policy) as task rules."""
    policies = retry if isinstance(retry, list) else [retry]
    rules: list[dict[str, Any]] = []
    renames = policy_renames(m, kind, iterator)
    for n, policy in enumerate(policies):
        where = (*path, n) if isinstance(retry, list) else path
        if isinstance(policy, dict) and "then" in policy:
            when, then = policy.get("when"), policy["then"]
        elif isinstance(policy, dict):
            when, then = policy.get("when"), {k: v for k, v in policy.items() if k != "when"}
        else:
            when, then = None, policy
        out_then = retry_then(
            m, then, (*where, "then") if isinstance(policy, dict) and "then" in policy else where
        )
        if out_then is None:
            continue
        condition = rewrite(when, renames, policy_events) if isinstance(when, str) else ERROR_TEST
        rule: dict[str, Any] = {}
        m.put(
            rule,
            "when",
            condition,
            (*where, "when") if isinstance(policy, dict) and "when" in policy else None,
        )
        m.put(
            rule,
            "then",
            out_then,
            (*where, "then") if isinstance(policy, dict) and "then" in policy else None,
        )
        m.o.set(rules, len(rules), where)
        rules.append(rule)
    return rules


def eval_rules(m: Migrator, entries: Any, path: Path, renames: dict[str, str]) -> list[dict[str, Any]]:
    """Spec 002's `eval: [{expr, do, ...}, {else: {do}}]` as `spec.policy.rules`."""
    rules: list[dict[str, Any]] = []
    for n, entry in enumerate(entries if isinstance(entries, list) else [entries]):
        where = (*path, n)
        if not isinstance(entry, dict):
            m.cannot(where, "an `eval` entry that is not a mapping")
            continue
        rule: dict[str, Any] = {}
        if "else" in entry:
            body = (
                entry["else"]
                if isinstance(entry["else"], dict)
                else {k: v for k, v in entry.items() if k != "else"}
            )
            then = _then(m, body.get("then", body), (*where, "else"), renames)
            m.put(rule, "else", {"then": then}, (*where, "else"))
        else:
            when = entry.get("expr", entry.get("when", "{{ true }}"))
            m.put(rule, "when", rewrite_all(when, renames), (*where, "expr" if "expr" in entry else "when"))
            body = entry.get("then", {k: v for k, v in entry.items() if k not in ("expr", "when")})
            m.put(rule, "then", _then(m, body, where, renames), where)
        m.o.set(rules, len(rules), where)
        rules.append(rule)
    return rules


def _then(m: Migrator, body: Any, path: Path, renames: dict[str, str]) -> dict[str, Any]:
    if not isinstance(body, dict):
        return m.flow({"do": "continue"})
    out: dict[str, Any] = {}
    for key, value in body.items():
        value = rewrite_all(value, renames)
        if key in ("set_vars", "set_shared"):
            out.setdefault("set_ctx", {}).update(value if isinstance(value, dict) else {})
            m.did((*path, key), f"`{key}` became `set_ctx` (execution state; not allowed in parallel loops)")
        elif key == "max_attempts":
            m.put(out, "attempts", value, (*path, key))
        elif key in ("do", "attempts", "backoff", "delay", "max_delay", "to", "set_ctx", "set_iter"):
            m.put(out, key, value, (*path, key))
        else:
            m.cannot(
                (*path, key),
                f"`{key}` has no v10 form in a task rule (set_prev, sinks and routing "
                "are not task directives); dropped",
            )
    out.setdefault("do", "continue")
    return m.flow(out) if all(not isinstance(v, dict | list) for v in out.values()) else out


def add_rules(
    m: Migrator, task: dict[str, Any], front: list[dict[str, Any]], back: list[dict[str, Any]]
) -> None:
    """Put ``front`` before and ``back`` after the task's rules; a task that had no policy gets the
    default behaviour spelled out after them (error → fail, else continue), since a policy where
    nothing matches continues even on error (SEMANTICS §6)."""
    if not front and not back:
        return
    spec = task.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    policy = spec.setdefault("policy", {})
    had = isinstance(policy.get("rules"), list) and bool(policy["rules"])
    rules: list[Any] = policy.setdefault("rules", [])
    old = [(r, m.origin(rules, n)) for n, r in enumerate(rules)]
    new = [(r, m.origin(front, n)) for n, r in enumerate(front)] + old
    new += [(r, m.origin(back, n)) for n, r in enumerate(back)]
    if not had and not any(isinstance(r, dict) and "else" in r for r in [*front, *back]):
        new.append(({"when": ERROR_TEST, "then": m.flow({"do": "fail"})}, None))
        new.append(({"else": {"then": m.flow({"do": "continue"})}}, None))
    elses = [pair for pair in new if isinstance(pair[0], dict) and "else" in pair[0]]
    new = [pair for pair in new if pair not in elses] + elses[:1]  # `else` goes last
    rules.clear()
    for rule, origin in new:
        m.put(rules, None, rule, origin)
