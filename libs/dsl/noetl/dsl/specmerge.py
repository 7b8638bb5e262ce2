"""Spec layering (SEMANTICS.md §14): kind defaults → executor.spec → step.spec → loop.spec →
task.spec, inner scopes winning.

Knobs (``timeout``, ``max_task_runs``, ``policy.limits``) flow down so a playbook can set them
once. Policies do not: each scope's policy means something only in that scope (a step's
``admit`` is not a task rule, a step's ``failure`` mode is not a loop's), so of an outer
``policy`` only ``limits`` is carried; the task's own rules live in ``Task.policy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl.dsl.model import Playbook, Step, Task

FLOWING_POLICY_KEYS = frozenset({"limits"})

BASE_DEFAULTS: dict[str, Any] = {
    "max_task_runs": 10_000,
    "policy": {"limits": {"max_payload_bytes": 65_536}},
}

_KIND_SPECIFIC: dict[str, dict[str, Any]] = {
    "http": {"timeout": {"connect": 10, "read": 30}},
    "python": {"timeout": None},
    "postgres": {"timeout": None},
    "duckdb": {"timeout": None},
    "playbook": {"timeout": None},
    "workbook": {},
    "noop": {},
    "secrets": {},
    "script": {"timeout": None},
}


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid on ``base``: mappings merge recursively, lists and scalars (None included)
    from ``over`` replace. Returns fresh containers all the way down; inputs stay untouched."""
    out = {key: _copy(value) for key, value in base.items()}
    for key, value in over.items():
        current = out.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            out[key] = deep_merge(current, value)
        else:
            out[key] = _copy(value)
    return out


def _copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_copy(item) for item in value]
    return value


KIND_DEFAULTS: dict[str, dict[str, Any]] = {
    kind: deep_merge(BASE_DEFAULTS, specific) for kind, specific in _KIND_SPECIFIC.items()
}


def kind_defaults(kind: str) -> dict[str, Any]:
    """The defaults of a kind (a plug-in kind gets the base defaults)."""
    return _copy(KIND_DEFAULTS.get(kind, BASE_DEFAULTS))  # type: ignore[no-any-return]


def scoped(spec: Mapping[str, Any] | None) -> dict[str, Any]:
    """A spec layer as it flows to inner scopes: its ``policy`` reduced to the keys that flow."""
    if not spec:
        return {}
    out = dict(spec)
    policy = out.pop("policy", None)
    if isinstance(policy, Mapping):
        kept = {key: value for key, value in policy.items() if key in FLOWING_POLICY_KEYS}
        if kept:
            out["policy"] = kept
    return out


def _executor_spec(playbook: Playbook) -> Mapping[str, Any] | None:
    spec = (playbook.executor or {}).get("spec")
    return spec if isinstance(spec, Mapping) else None


def _layers(playbook: Playbook, step: Step) -> list[dict[str, Any]]:
    layers = [scoped(_executor_spec(playbook)), scoped(step.spec)]
    if step.loop is not None:
        layers.append(scoped(step.loop.spec))
    return layers


# A playbook text never changes under its digest, so its merged specs are computed once per
# (digest, step, task): the hot path asks for them on every command and every task run. The
# returned mappings are shared: callers read them and must not change them.
_MEMO: dict[tuple[str, str, str | None], dict[str, Any]] = {}
_MEMO_MAX = 50_000


def _memo(playbook: Playbook, step: Step, task: Task | None, build: Any) -> dict[str, Any]:
    if not playbook.digest:  # built in code, not from a text: nothing identifies it safely
        return build()  # type: ignore[no-any-return]
    key = (playbook.digest, step.name, None if task is None else f"{task.name}\x1f{task.kind}")
    out = _MEMO.get(key)
    if out is None:
        if len(_MEMO) >= _MEMO_MAX:
            _MEMO.clear()
        out = _MEMO[key] = build()
    return out


def effective_step_spec(playbook: Playbook, step: Step) -> dict[str, Any]:
    """Base defaults → executor.spec → step.spec → loop.spec: the kind-independent knobs a step
    run needs (``max_task_runs``, ``policy.limits``)."""
    return _memo(playbook, step, None, lambda: _step_spec(playbook, step))


def effective_task_spec(playbook: Playbook, step: Step, task: Task) -> dict[str, Any]:
    """Kind defaults → executor.spec → step.spec → loop.spec → task.spec."""
    return _memo(playbook, step, task, lambda: _task_spec(playbook, step, task))


def _step_spec(playbook: Playbook, step: Step) -> dict[str, Any]:
    out = _copy(BASE_DEFAULTS)
    for layer in _layers(playbook, step):
        out = deep_merge(out, layer)
    return out  # type: ignore[no-any-return]


def _task_spec(playbook: Playbook, step: Step, task: Task) -> dict[str, Any]:
    out = kind_defaults(task.kind)
    for layer in (*_layers(playbook, step), scoped(task.spec)):
        out = deep_merge(out, layer)
    return out
