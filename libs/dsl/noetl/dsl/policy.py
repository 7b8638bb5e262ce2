"""The three policy evaluators: admission (server), task rules (worker), arcs (server).

They are pure functions of a policy, a context mapping and a template engine, so the server's
engine can replay them from the event log and get the same answers (SEMANTICS.md §6-§8). They
decide; they never apply: a ``set_ctx`` comes back rendered in the :class:`Directive` and the
caller records it as an event and folds it with :func:`apply_patch`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.dsl.errors import TemplateError
from noetl.dsl.model import DO_VALUES, Do, Next, Policy, Rule
from noetl.dsl.templates import TemplateEngine

DEFAULT_ATTEMPTS = 3
DEFAULT_DELAY = 1.0
BACKOFFS = ("none", "fixed", "linear", "exponential")


@dataclass(frozen=True)
class Directive:
    """What the worker does after a task outcome.

    ``delay_seconds`` is already the backoff delay of the retry about to happen (0.0 unless
    ``do == "retry"``); ``set_ctx``/``set_iter`` are rendered, not yet applied. ``matched`` and
    ``rule_index`` say which rule decided (``rule_index`` is None for the defaults), for events
    and diagnostics.
    """

    do: Do
    to: str | None = None
    attempts: int = DEFAULT_ATTEMPTS
    delay_seconds: float = 0.0
    set_ctx: dict[str, Any] | None = None
    set_iter: dict[str, Any] | None = None
    matched: bool = False
    rule_index: int | None = None


@dataclass(frozen=True)
class FiredArc:
    index: int
    step: str
    args: dict[str, Any]


def truthy(value: Any) -> bool:
    """The truth of a rendered ``when``: Python's (SEMANTICS.md §4), so ``"false"`` is true."""
    return bool(value)


def _rule_path(rule: Rule, base: str, index: int) -> str:
    if rule.path:
        return rule.path
    return f"{base}.rules[{index}]" if base else f"rules[{index}]"


def first_match(policy: Policy, context: Mapping[str, Any], engine: TemplateEngine,
                path: str = "") -> tuple[int, Rule] | None:
    """The rule that decides: the first whose ``when`` is truthy, else the ``else`` rule.

    ``else`` is the fallback wherever it is written; rules after it are still tried first.
    """
    base = path or policy.path
    fallback: tuple[int, Rule] | None = None
    for index, rule in enumerate(policy.rules):
        if rule.is_else:
            if fallback is None:
                fallback = (index, rule)
            continue
        if truthy(engine.render(rule.when, context, f"{_rule_path(rule, base, index)}.when")):
            return index, rule
    return fallback


def admit(policy: Policy | None, context: Mapping[str, Any], engine: TemplateEngine,
          path: str = "") -> bool:
    """Whether a token may enter its step (``step.spec.policy.admit``); no verdict → allow."""
    if policy is None:
        return True
    hit = first_match(policy, context, engine, path)
    if hit is None:
        return True
    index, rule = hit
    allow = rule.then.get("allow", True)
    where = f"{_rule_path(rule, path or policy.path, index)}.then.allow"
    return truthy(engine.render(allow, context, where))


def evaluate_task_policy(policy: Policy | None, outcome: Mapping[str, Any], context: Mapping[str, Any],
                         engine: TemplateEngine, *, retry_number: int) -> Directive:
    """The directive for one task outcome (SEMANTICS.md §6).

    ``context`` already holds ``outcome``, ``_prev``, ``_task``, ``_attempt``, ``iter``, ``ctx``…;
    ``outcome`` itself only decides when there is no policy. ``retry_number`` is the number of
    the retry that ``do: retry`` would start (1 for the first), which the backoff depends on.
    """
    if policy is None:
        return Directive(do="continue" if outcome.get("status") == "ok" else "fail")
    hit = first_match(policy, context, engine)
    if hit is None:
        return Directive(do=policy.on_unmatched)
    index, rule = hit
    where = f"{_rule_path(rule, policy.path, index)}.then"
    then = rule.then
    do = then.get("do", "continue")
    if do not in DO_VALUES:
        raise ValueError(f"{where}.do: {do!r} is not one of {', '.join(DO_VALUES)}")
    # every value is rendered against the context as it is now, before any patch (§5)
    set_ctx = _render_patch(then, "set_ctx", context, engine, where)
    set_iter = _render_patch(then, "set_iter", context, engine, where)
    attempts = DEFAULT_ATTEMPTS
    delay = 0.0
    if do == "retry":
        attempts = _positive_int(engine.render(then.get("attempts", DEFAULT_ATTEMPTS), context,
                                               f"{where}.attempts"), f"{where}.attempts")
        delay = _retry_delay(then, context, engine, where, retry_number)
    to = then.get("to")
    return Directive(do=do, to=None if to is None else str(to), attempts=attempts, delay_seconds=delay,
                     set_ctx=set_ctx, set_iter=set_iter, matched=True, rule_index=index)


def backoff_delay(backoff: str, delay: float, retry_number: int, max_delay: float | None = None) -> float:
    """Delay before retry number ``retry_number`` (1-based): none/fixed → delay, linear →
    delay·k, exponential → delay·2^(k-1); capped by ``max_delay``; never negative."""
    k = max(retry_number, 1)
    if backoff in ("none", "fixed"):
        value = delay
    elif backoff == "linear":
        value = delay * k
    elif backoff == "exponential":
        value = delay * 2.0 ** min(k - 1, 1023)     # 2.0**1024 would raise; inf is a fine answer
    else:
        raise ValueError(f"backoff {backoff!r} is not one of {', '.join(BACKOFFS)}")
    if max_delay is not None:
        value = min(value, max_delay)
    return max(value, 0.0)


def _retry_delay(then: Mapping[str, Any], context: Mapping[str, Any], engine: TemplateEngine,
                 where: str, retry_number: int) -> float:
    delay = _number(engine.render(then.get("delay", DEFAULT_DELAY), context, f"{where}.delay"),
                    f"{where}.delay")
    raw_max = then.get("max_delay")
    max_delay = None
    if raw_max is not None:
        max_delay = _number(engine.render(raw_max, context, f"{where}.max_delay"), f"{where}.max_delay")
    return backoff_delay(str(then.get("backoff", "none")), delay, retry_number, max_delay)


def _render_patch(then: Mapping[str, Any], key: str, context: Mapping[str, Any], engine: TemplateEngine,
                  where: str) -> dict[str, Any] | None:
    raw = then.get(key)
    if raw is None:
        return None
    rendered = engine.render(raw, context, f"{where}.{key}")
    if not isinstance(rendered, Mapping):
        raise TemplateError(f"{key} must be a mapping, got {type(rendered).__name__} in {where}.{key}",
                            path=f"{where}.{key}")
    return dict(rendered)


def _number(value: Any, where: str) -> float:
    """Delays are often read from headers, so numeric strings count (``retry-after: "2"``)."""
    if not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
        else:
            if not math.isnan(number):
                return number
    raise TemplateError(f"expected a number of seconds, got {value!r} in {where}", path=where)


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    raise TemplateError(f"expected a positive integer, got {value!r} in {where}", path=where)


def apply_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` with ``patch`` applied, as a new dict; neither input is modified.

    Top-level keys replace; a dotted key ``a.b.c`` sets a nested entry, creating mappings on
    the way and replacing a non-mapping that stands in the way (as lodash's ``set`` does).
    Unchanged subtrees are shared with ``target``, changed ones are copied along the path.
    """
    out = dict(target)
    for key, value in patch.items():
        if not (isinstance(key, str) and "." in key):
            out[key] = value
            continue
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            child = node.get(part)
            child = dict(child) if isinstance(child, Mapping) else {}
            node[part] = child
            node = child
        node[leaf] = value
    return out


def evaluate_arcs(next: Next | None, context: Mapping[str, Any], engine: TemplateEngine) -> list[FiredArc]:
    """The arcs that fire on a step's terminal event (SEMANTICS.md §8).

    ``when`` defaults to true; ``exclusive`` stops at the first arc that fires, ``inclusive``
    tries them all. ``args`` are rendered only for arcs that fire, so an arc that does not
    fire cannot fail on its args.
    """
    if next is None:
        return []
    fired: list[FiredArc] = []
    for index, arc in enumerate(next.arcs):
        where = arc.path or (f"{next.path}.arcs[{index}]" if next.path else f"arcs[{index}]")
        if arc.when is not None and not truthy(engine.render(arc.when, context, f"{where}.when")):
            continue
        args = engine.render(arc.args or {}, context, f"{where}.args")
        if not isinstance(args, Mapping):
            raise TemplateError(f"args must be a mapping, got {type(args).__name__} in {where}.args",
                                path=f"{where}.args")
        fired.append(FiredArc(index=index, step=arc.step, args=dict(args)))
        if next.mode != "inclusive":
            break
    return fired
