"""Closed key sets: every mapping of a playbook has a fixed set of keys (issue 27).

A misspelt key is the quietest bug a playbook can have: `admission:` for `admit:` removes the
gate, `failure: {mod: best_effort}` stays fail-fast, and the run says nothing. So every mapping
the runtime reads lists its keys here, and a key outside the list is an error at its line that
names the key meant (did-you-mean), or, for a knob of another scope, the scope where it means
something, or, for a placeholder the specifications reserve without the runtime reading it, why
it is refused. The scope-specific checks (``knobs.py``, ``checks_step.py``) run first; a key they
already reported is not reported again.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from noetl.dsl.kinds import kind_model, known_kinds
from noetl.dsl.report import Report, describe
from noetl.dsl.task_models import COMMON_SPEC_KNOBS, spec_knobs
from noetl.dsl.yamlload import Path

# the knobs every layered spec may hold (SEMANTICS §14): they flow down to the tasks
FLOWING_KNOBS = ("timeout", "max_task_runs", "pool", "policy")
LOOP_SPEC_KEYS = ("mode", "max_in_flight")
EXECUTOR_KEYS = ("spec",)
EXECUTOR_POLICY_KEYS = ("limits", "defaults", "results")
STEP_POLICY_KEYS = ("admit", "failure", "lifecycle", "limits")
LOOP_POLICY_KEYS = ("exec", "reducers", "mode", "max_in_flight", "limits")
FAILURE_KEYS = ("mode",)
NEXT_SPEC_KEYS = ("mode",)
DEFAULTS_KEYS = ("timeouts",)
RESULTS_KEYS = ("reference_first",)
KEYCHAIN_ENTRY_KEYS = ("name", "kind")
METADATA_KEYS = ("name", "path", "version", "description", "tags", "labels")
WORKBOOK_KEYS = ("tasks",)
# limits that bound an execution as a whole: only the executor's spec sets them
EXECUTION_LIMITS = ("max_step_runs", "max_loop_items", "max_event_bytes")
RUN_LIMITS = ("max_payload_bytes",)

# reserved by the specifications (spec 003 §5) and read by nothing: refused with the reason
RESERVED = "reserved by the specification (spec 003 §5) and not implemented: nothing reads it, so remove it"
PLACEHOLDERS: dict[str, dict[str, str]] = {
    "executor.spec.policy": {
        "placement": f"`placement` is {RESERVED}; a step's `spec.pool` chooses its workers",
        "cost": f"`cost` is {RESERVED}",
    },
    "executor.spec.policy.defaults": {
        "resources": f"`defaults.resources` is {RESERVED}; a step's `spec.pool` chooses workers with the "
        "resources it needs",
    },
    "step.spec.policy": {
        "emit": f"`emit` is {RESERVED}; every step already emits its events (SEMANTICS §7)",
        "tracing": f"`tracing` is {RESERVED}; every event carries the execution's trace id",
        "quotas": f"`quotas` is {RESERVED}; bound an execution with `executor.spec.policy.limits`",
        "compensation": f"`compensation` is {RESERVED}; route a failure with an arc on "
        "`event.status == 'error'`",
    },
    "next.spec": {
        "policy": f"`next.spec.policy` is {RESERVED}; a router's only knob is `next.spec.mode`, and each "
        "arc decides with its `when`",
    },
    "loop.spec.policy": {
        "ordering": f"`ordering` is {RESERVED}; a loop's result is always in the order of `in`",
        "backpressure": f"`backpressure` is {RESERVED}; `max_in_flight` bounds the iterations at once",
        "partitioning": f"`partitioning` is {RESERVED}; page the input with a nested loop instead",
    },
}

# a key written in one scope that belongs to another: where it goes
ELSEWHERE: dict[str, str] = {
    "admit": "the admission gate goes in the step's `spec.policy.admit`",
    "failure": "the failure mode goes in the step's `spec.policy.failure.mode`",
    "lifecycle": "time limits of a step go in the step's `spec.policy.lifecycle`",
    "rules": "outcome rules go in a task's `spec.policy.rules`",
    "on_unmatched": "`on_unmatched` goes in a task's `spec.policy`",
    "exec": "`exec` is a loop knob: it goes in the step's `loop.spec.policy.exec`",
    "reducers": "`reducers` is a loop knob: it goes in the step's `loop.spec.policy.reducers`",
    "mode": "`mode` is a loop knob (`loop.spec.mode`), a router's (`next.spec.mode`) or an "
    "admission gate's (`spec.policy.admit.mode`)",
    "max_in_flight": "`max_in_flight` is a loop knob: it goes in the step's `loop.spec.max_in_flight`",
    "limits": "limits go in `executor.spec.policy.limits` (or a step's or loop's `spec.policy.limits` "
    "for `max_payload_bytes`)",
    "defaults": "`defaults` goes in `executor.spec.policy.defaults`",
    "results": "`results` goes in `executor.spec.policy.results`",
    "timeouts": "default time limits go in `executor.spec.policy.defaults.timeouts`",
    "timeout_s": "a step's time limit goes in its `spec.policy.lifecycle.timeout_s`",
    "deadline_s": "a step's deadline goes in its `spec.policy.lifecycle.deadline_s`",
    **{
        name: f"`{name}` bounds a whole execution: set it in `executor.spec.policy.limits.{name}`"
        for name in EXECUTION_LIMITS
    },
    "max_payload_bytes": "`max_payload_bytes` goes in a `spec.policy.limits` (executor, step or loop)",
}

# common misspellings a close-match search would miss
ALIASES: dict[str, str] = {
    "admission": "admit",
    "admit_rules": "admit",
    "gate": "admit",
    "failure_mode": "failure",
    "on_failure": "failure",
    "on_error": "failure",
    "parallelism": "max_in_flight",
    "concurrency": "max_in_flight",
    "max_parallel": "max_in_flight",
    "reducer": "reducers",
    "execution": "exec",
    "placement": "exec",
    "timeouts": "timeout",
    "worker_pool": "pool",
    "queue": "pool",
    "limit": "limits",
}


def kind_knobs() -> tuple[str, ...] | None:
    """The task knobs of every known kind (``database`` for duckdb, ...): an outer spec may set
    them for the tasks below it. None when a plug-in kind declared no model (any knob passes)."""
    out: list[str] = []
    for kind in sorted(known_kinds()):
        knobs = spec_knobs(kind_model(kind))
        if knobs is None:
            return None
        out.extend(k for k in knobs if k not in COMMON_SPEC_KNOBS and k not in out)
    return tuple(out)


def did_you_mean(key: Any, allowed: Iterable[str]) -> str | None:
    """The key meant by a misspelt one: a known alias, else the closest allowed name."""
    choices = list(allowed)
    if not isinstance(key, str):
        return None
    alias = ALIASES.get(key.lower())
    if alias in choices:
        return alias
    close = difflib.get_close_matches(key.lower(), choices, n=1, cutoff=0.5)
    if close:
        return close[0]
    prefix = [c for c in choices if len(key) >= 3 and (c.startswith(key[:4]) or key.startswith(c[:4]))]
    return prefix[0] if prefix else None


def check_closed(
    mapping: Mapping[str, Any],
    path: Path,
    allowed: Iterable[str],
    what: str,
    r: Report,
    *,
    scope: str | None = None,
    elsewhere: bool = True,
) -> None:
    """Report every key of ``mapping`` outside ``allowed`` that no earlier check reported.

    ``what`` names the mapping in the message (``a step's `spec.policy` ``); ``scope`` keys
    ``PLACEHOLDERS`` (a reserved key is refused with its reason); ``elsewhere``: name the scope a
    knob of another scope belongs to."""
    keys = tuple(allowed)
    for key in mapping:
        if key in keys or r.has((*path, key)):
            continue
        where = (*path, key)
        reserved = PLACEHOLDERS.get(scope or "", {}).get(key) if isinstance(key, str) else None
        if reserved is not None:
            r.add(where, reserved)
            continue
        meant = did_you_mean(key, keys)
        home = ELSEWHERE.get(key) if elsewhere and isinstance(key, str) else None
        if home is not None:  # a real knob of another scope: more likely misplaced than misspelt
            r.add(where, f"{describe(key)} has no meaning in {what}: {home}")
            continue
        hint = f"did you mean `{meant}`? " if meant is not None else ""
        r.add(where, f"unknown key {describe(key)} in {what}: {hint}it has {', '.join(keys)}")


def check_limits(limits: Any, path: Path, executor: bool, r: Report) -> None:
    """``policy.limits``: the executor's holds every limit; a step's or a loop's only the ones
    that apply to one step run (``max_payload_bytes``), since the execution-wide ones are read
    from the executor alone and would be ignored there."""
    if limits is None:
        return
    if not isinstance(limits, dict):
        r.add(path, f"`limits` is a mapping of limits (max_payload_bytes, ...), found {describe(limits)}")
        return
    for key, value in limits.items():
        where = (*path, key)
        if not executor and key in EXECUTION_LIMITS:
            r.add(
                where,
                f"`{key}` bounds a whole execution and is read only from the executor: set it in "
                f"`executor.spec.policy.limits.{key}` (a step's or a loop's `limits` holds "
                f"{', '.join(RUN_LIMITS)})",
            )
        elif key in (*RUN_LIMITS, *EXECUTION_LIMITS) and not (
            isinstance(value, int) and not isinstance(value, bool) and value > 0
        ):
            r.add(where, f"`{key}` is a whole number above 0, found {describe(value)}")
    allowed = (*RUN_LIMITS, *EXECUTION_LIMITS) if executor else RUN_LIMITS
    what = "`executor.spec.policy.limits`" if executor else "a step's or a loop's `spec.policy.limits`"
    check_closed(limits, path, allowed, what, r, elsewhere=False)


def check_results(results: Any, path: Path, r: Report) -> None:
    """``executor.spec.policy.results.reference_first`` (spec 003 §5.1): results always go by
    reference past ``max_payload_bytes`` (SEMANTICS §11); ``true`` says so, ``false`` is refused
    rather than accepted and ignored."""
    if results is None:
        return
    if not isinstance(results, dict):
        r.add(path, f"`results` is a mapping (`{{reference_first: true}}`), found {describe(results)}")
        return
    if "reference_first" in results and results["reference_first"] is not True:
        r.add(
            (*path, "reference_first"),
            "`reference_first` can only be true: a result larger than `limits.max_payload_bytes` always "
            "travels by reference (events must stay small); to keep larger results inline, raise "
            f"`executor.spec.policy.limits.max_payload_bytes` (found {describe(results['reference_first'])})",
        )
    check_closed(results, path, RESULTS_KEYS, "`executor.spec.policy.results`", r, elsewhere=False)


def spec_keys(*extra: str) -> tuple[str, ...] | None:
    """The keys a layered (executor, step or loop) spec may hold; None when any knob passes."""
    knobs = kind_knobs()
    return None if knobs is None else (*FLOWING_KNOBS, *extra, *knobs)
