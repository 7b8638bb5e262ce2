"""Where each spec knob belongs, and the checks that name the right place for a misplaced one.

Specs layer (executor → step → loop → task, SEMANTICS §14), so a knob written one scope off is
accepted by YAML and silently ignored by the runtime: `mode: parallel` on a task leaves the loop
sequential, `pool` on a task sends nothing anywhere. Each knob has one home; finding it elsewhere
is an error that names the home.
"""

from __future__ import annotations

import difflib
from typing import Any

from noetl.dsl import legacy
from noetl.dsl.closed import (
    DEFAULTS_KEYS,
    EXECUTOR_POLICY_KEYS,
    check_closed,
    check_limits,
    check_results,
    did_you_mean,
    spec_keys,
)
from noetl.dsl.report import Report, describe
from noetl.dsl.yamlload import Path

LOOP_KNOBS = ("mode", "max_in_flight")  # loop.spec.<knob> (or loop.spec.policy.<knob>)
LOOP_POLICY_KNOBS = ("exec", "reducers")  # loop.spec.policy.<knob>
STEP_RUN_KNOBS = ("pool", "max_task_runs")  # a whole step run: executor, step or loop spec
STEP_POLICY_KEYS = ("admit", "failure", "lifecycle")  # step.spec.policy.<key>
TASK_POLICY_KEYS = ("rules", "on_unmatched", "before", "after", "finally")  # task.spec.policy.<key>
TIMEOUT_KEYS = ("connect", "read")


def loop_knob(knob: str) -> str | None:
    """The message for a loop knob found outside the loop's spec; None for other knobs."""
    if knob in LOOP_KNOBS:
        return f"`{knob}` is a loop knob: it goes in the step's `loop.spec.{knob}`"
    if knob in LOOP_POLICY_KNOBS:
        return f"`{knob}` is a loop knob: it goes in the step's `loop.spec.policy.{knob}`"
    return None


def step_policy_key(key: str) -> str | None:
    if key in STEP_POLICY_KEYS:
        return f"`{key}` is a step policy: it goes in the step's `spec.policy.{key}`"
    return None


def task_policy_key(key: str) -> str | None:
    if key in TASK_POLICY_KEYS:
        return f"`{key}` belongs to a task policy: it goes in a task's `spec.policy.{key}`"
    return None


def task_policy_misplaced(key: str) -> str | None:
    """The message for a key of another scope's policy found in a task's `spec.policy`."""
    if key == "limits":
        return (
            "`limits` applies to a whole step run: set it in the step's (or the executor's) "
            "`spec.policy.limits`"
        )
    return step_policy_key(key) or loop_knob(key)


def check_timeout(spec: dict[str, Any], path: Path, r: Report) -> None:
    """``timeout`` is read as seconds by every kind (spec is never rendered, so no templates)."""
    if "timeout" not in spec or spec["timeout"] is None:
        return
    value, where = spec["timeout"], (*path, "timeout")
    if isinstance(value, dict):
        for key, inner in value.items():
            if key not in TIMEOUT_KEYS:
                r.add((*where, key), f"unknown key {describe(key)} in `timeout`: it has `connect` and `read`")
            elif inner is not None and not _seconds(inner):
                r.add(
                    (*where, key),
                    f"`timeout.{key}` is a number of seconds (above 0), found {describe(inner)}",
                )
    elif not _seconds(value):
        r.add(
            where,
            f"`timeout` is a number of seconds (above 0) or `{{connect: s, read: s}}`, found "
            f"{describe(value)} (a spec is not rendered: no templates)",
        )


def _seconds(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def check_task_spec(
    spec: dict[str, Any], path: Path, kind: str, allowed: tuple[str, ...] | None, r: Report
) -> None:
    """A task's own spec; ``allowed`` is None when the kind accepts any knob (a plug-in kind)."""
    check_timeout(spec, path, r)
    for knob in spec:
        if knob == "policy":
            continue
        misplaced = loop_knob(knob)
        if knob == "pool" and kind in ("postgres", "duckdb") and isinstance(spec[knob], dict):
            misplaced = (  # upstream NoETL's database connection pool, not a worker pool
                f"`pool` with settings on a {kind} task is a database connection pool (upstream NoETL's): "
                "this engine opens the connection per task run and has no pool settings, so remove it "
                "(`noetl migrate --from upstream` does)"
            )
        elif knob in STEP_RUN_KNOBS:
            misplaced = (
                f"`{knob}` applies to a whole step run: set it in the step's `spec.{knob}` "
                f"(or `executor.spec.{knob}`)"
            )
        elif knob == "next_mode":
            misplaced = legacy.NEXT_MODE
        if misplaced is not None:
            r.add((*path, knob), misplaced)
        elif allowed is not None and knob not in allowed:
            close = difflib.get_close_matches(knob, allowed, n=1)
            hint = f"did you mean `{close[0]}`? " if close else ""
            r.add(
                (*path, knob),
                f"unknown knob {describe(knob)} in the `spec` of a `kind: {kind}` task: {hint}a "
                f"`kind: {kind}` task's spec has: {', '.join(allowed)} (the task's fields go beside `kind`)",
            )


def check_loop_spec(spec: dict[str, Any], path: Path, r: Report) -> None:
    """Knobs of a task or of the step found in `loop.spec`."""
    check_timeout(spec, path, r)
    for knob in LOOP_POLICY_KNOBS:
        if knob in spec:
            r.add((*path, knob), f"`loop.spec.{knob}` goes in `loop.spec.policy.{knob}`")
    policy = spec.get("policy")
    if isinstance(policy, dict):
        for key in policy:
            message = task_policy_key(key) or step_policy_key(key)
            if message is not None:
                r.add((*path, "policy", key), f"{message}, not in `loop.spec.policy`")


def check_step_spec(spec: dict[str, Any], path: Path, r: Report) -> None:
    """Knobs of a loop or of a task found in a step's spec (the top-level loop knobs are checked by
    the step check, which predates this table)."""
    check_timeout(spec, path, r)
    for knob in LOOP_POLICY_KNOBS:
        if knob in spec:
            r.add((*path, knob), loop_knob(knob) or "")
    policy = spec.get("policy")
    if isinstance(policy, dict):
        for key in policy:
            message = loop_knob(key) or (task_policy_key(key) if key != "rules" else None)
            if message is not None:
                r.add((*path, "policy", key), f"{message}, not in the step's `spec.policy`")


def check_executor_spec(spec: dict[str, Any], path: Path, r: Report) -> None:
    """Loop knobs do not flow from the executor (each loop has its own), nor do task rules."""
    check_timeout(spec, path, r)
    for knob in spec:
        message = loop_knob(knob)
        if message is not None:
            r.add((*path, knob), f"{message}; `executor.spec` does not set it for every loop")
    if (keys := spec_keys()) is not None:
        check_closed(spec, path, keys, "`executor.spec`", r)
    policy = spec.get("policy")
    if isinstance(policy, dict):
        ppath = (*path, "policy")
        for key in policy:
            message = loop_knob(key) or task_policy_key(key) or step_policy_key(key)
            if message is not None:
                r.add((*ppath, key), f"{message}, not in `executor.spec.policy`")
        if policy.get("defaults") is not None:
            _check_defaults(policy["defaults"], (*ppath, "defaults"), r)
        check_limits(policy.get("limits"), (*ppath, "limits"), True, r)
        check_results(policy.get("results"), (*ppath, "results"), r)
        check_closed(
            policy, ppath, EXECUTOR_POLICY_KEYS, "`executor.spec.policy`", r, scope="executor.spec.policy"
        )
    elif policy is not None:
        r.add((*path, "policy"), f"`executor.spec.policy` is a mapping, found {describe(policy)}")


DEFAULT_TIMEOUT_KEYS = ("step_s", "execution_s")


def _check_defaults(defaults: Any, path: Path, r: Report) -> None:
    """``executor.spec.policy.defaults.timeouts: {step_s, execution_s}`` (SEMANTICS §16)."""
    if not isinstance(defaults, dict):
        r.add(
            path,
            f"`defaults` is a mapping (`{{timeouts: {{step_s, execution_s}}}}`), found {describe(defaults)}",
        )
        return
    check_closed(
        defaults, path, DEFAULTS_KEYS, "`executor.spec.policy.defaults`", r,
        scope="executor.spec.policy.defaults", elsewhere=False,
    )
    timeouts = defaults.get("timeouts")
    if timeouts is None:
        return
    if not isinstance(timeouts, dict):
        r.add(
            (*path, "timeouts"), f"`timeouts` is `{{step_s: N, execution_s: M}}`, found {describe(timeouts)}"
        )
        return
    for key, value in timeouts.items():
        if key not in DEFAULT_TIMEOUT_KEYS:
            meant = did_you_mean(key, DEFAULT_TIMEOUT_KEYS)
            hint = f"did you mean `{meant}`? " if meant else ""
            r.add(
                (*path, "timeouts", key),
                f"unknown key {describe(key)} in `timeouts`: {hint}it has step_s and execution_s",
            )
        elif value is not None and not _seconds(value):
            r.add(
                (*path, "timeouts", key), f"`{key}` is a number of seconds (above 0), found {describe(value)}"
            )
