"""Reducers (SEMANTICS §20): how the ctx writes of a loop's iterations are combined.

Parallel iterations that `set_ctx` the same key would race: the last terminal event folded would
win. A reducer makes the result independent of the order (for `sum`, `min`, `max`, `count`,
`merge` of disjoint keys) or at least a function of the log order (`append`, `extend`), so replay
reproduces it. The server applies them when it folds an iteration's terminal event; this module
is pure so the fold, replay and the checks share one definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from noetl.dsl.errors import ReducerTypeError
from noetl.dsl.policy import apply_patch
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.yamlload import Path

REDUCERS = ("sum", "min", "max", "count", "append", "extend", "merge")
_MISSING = object()


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        here = out.get(key)
        out[key] = (
            _deep_merge(here, value) if isinstance(here, Mapping) and isinstance(value, Mapping) else value
        )
    return out


def combine(op: str, current: Any, value: Any, where: str) -> Any:
    """``current`` (``_MISSING`` when ctx lacks the key) combined with one write ``value``."""
    missing = current is _MISSING

    def wrong(what: str, bad: Any, needs: str) -> ReducerTypeError:
        return ReducerTypeError(
            f"{where}: reducer `{op}` needs {needs}, but {what} is {type_name(bad)} ({describe(bad)}): "
            f"write {needs} to this key, or declare the reducer that fits the value",
            reducer=op,
        )

    if op == "count":
        if not missing and not _number(current):
            raise wrong("ctx's current value", current, "a number")
        return (0 if missing else current) + 1
    if op in ("sum", "min", "max"):
        if not _number(value):
            raise wrong("the written value", value, "a number")
        if missing:
            return value
        if not _number(current):
            raise wrong("ctx's current value", current, "a number")
        return current + value if op == "sum" else min(current, value) if op == "min" else max(current, value)
    if op in ("append", "extend"):
        if not missing and not isinstance(current, list):
            raise wrong("ctx's current value", current, "a list")
        base = [] if missing else list(current)
        if op == "append":
            return [*base, value]
        if not isinstance(value, list):
            raise wrong("the written value", value, "a list")
        return base + value
    if op == "merge":
        if not isinstance(value, Mapping):
            raise wrong("the written value", value, "a mapping")
        if not missing and not isinstance(current, Mapping):
            raise wrong("ctx's current value", current, "a mapping")
        return _deep_merge({} if missing else current, value)
    raise ReducerTypeError(f"{where}: unknown reducer {op!r}", reducer=op)


def _get(ctx: Mapping[str, Any], key: str) -> Any:
    node: Any = ctx
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return _MISSING
        node = node[part]
    return node


def apply_reduced(
    ctx: dict[str, Any], patches: Sequence[Mapping[str, Any]], reducers: Mapping[str, str], where: str
) -> dict[str, Any]:
    """``ctx`` after an iteration's ``patches``: declared keys combined, others set.

    All or nothing: a write a reducer cannot take raises ``ReducerTypeError`` and the caller keeps
    ``ctx`` as it was, so a failed iteration never leaves half of its writes behind.
    """
    out = ctx
    for patch in patches:
        plain: dict[str, Any] = {}
        for key, value in patch.items():
            op = reducers.get(key)
            if op is None:
                plain[key] = value
                continue
            combined = combine(op, _get(out, key), value, f"{where}: ctx key {key!r}")
            out = apply_patch(out, {key: combined})
        if plain:
            out = apply_patch(out, plain)
    return out


def check_reducers(value: Any, path: Path, r: Report) -> frozenset[str]:
    """Check ``loop.spec.policy.reducers``; the declared ctx keys (empty when malformed)."""
    if not isinstance(value, dict):
        r.add(
            path,
            f"`reducers` maps ctx keys to a reducer ({', '.join(REDUCERS)}), found {type_name(value)}: "
            "e.g. `reducers: {total: sum, rows: extend}`",
        )
        return frozenset()
    keys = set()
    for key, op in value.items():
        if op not in REDUCERS:
            r.add(
                (*path, key),
                f"reducer of ctx key {key!r} is one of {', '.join(REDUCERS)}, found {describe(op)}",
            )
        else:
            keys.add(key)
    return frozenset(keys)
