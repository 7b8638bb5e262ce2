"""Checks for one step: its keys, spec and admission, loop, pipeline and router."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl import legacy
from noetl.dsl.checks_lifecycle import check_lifecycle
from noetl.dsl.checks_rules import check_no_control, check_pool, check_when, contains_control, read_rules
from noetl.dsl.checks_task import PipelineContext, check_pipeline
from noetl.dsl.closed import (
    FAILURE_KEYS,
    LOOP_POLICY_KEYS,
    LOOP_SPEC_KEYS,
    NEXT_SPEC_KEYS,
    STEP_POLICY_KEYS,
    check_closed,
    check_limits,
    spec_keys,
)
from noetl.dsl.knobs import check_loop_spec, check_step_spec
from noetl.dsl.reducers import check_reducers
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.shapes import task_entries
from noetl.dsl.yamlload import Path

STEP_KEYS = ("step", "desc", "spec", "loop", "tool", "next")
LOOP_KEYS = ("in", "iterator", "spec")
LOOP_ONLY_KNOBS = ("mode", "max_in_flight")
NEXT_KEYS = ("spec", "arcs")
ARC_KEYS = ("step", "when", "args", "spec")
ADMIT_KEYS = ("mode", "rules")
LOOP_MODES = ("sequential", "parallel")
NEXT_MODES = ("exclusive", "inclusive")
FAILURE_MODES = ("fail_fast", "best_effort")
ITERATOR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")  # a plain Jinja name: `iter.<iterator>`


@dataclass
class StepInfo:
    """What the workflow-level checks need from a step: its name and where its arcs lead."""

    name: str | None
    arcs: list[tuple[Path, str]] = field(default_factory=list)


def check_step(step: Any, path: Path, workbook: dict[str, Any], r: Report) -> StepInfo:
    if not isinstance(step, dict):
        r.add(
            path, f"a step is a mapping (`- step: <name>` with `tool` and/or `next`), found {type_name(step)}"
        )
        return StepInfo(None)
    name = step.get("step")
    if "step" not in step:
        r.add(path, "a step needs a name: `step: <name>`")
    elif not isinstance(name, str) or not name:
        r.add((*path, "step"), f"a step name is a non-empty string, found {describe(name)}")
    info = StepInfo(name if isinstance(name, str) and name else None)
    for key in step:
        if key in legacy.STEP_KEYS:
            r.add((*path, key), legacy.STEP_KEYS[key])
        elif key not in STEP_KEYS:
            r.add((*path, key), f"unknown step key {describe(key)}: a step has {', '.join(STEP_KEYS)}")
    if step.get("tool") in (None, []) and step.get("next") is None:
        r.add(
            path,
            f"step {describe(name)} has neither `tool` nor `next`: give it a `tool` pipeline, "
            "a `next` router, or both",
        )
    if step.get("desc") is not None and not isinstance(step["desc"], str):
        r.add((*path, "desc"), f"`desc` is a string, found {type_name(step['desc'])}")
    _check_step_spec(step.get("spec"), (*path, "spec"), r)
    parallel = _check_loop(step["loop"], (*path, "loop"), r) if "loop" in step else False
    ctx = PipelineContext(
        workbook=workbook,
        parallel=parallel,
        reducers=_reducers(step.get("loop"), path, r),
        in_loop="loop" in step,
    )
    check_pipeline(task_entries(name, step.get("tool"), path), ctx, r)
    if step.get("next") is not None:
        info.arcs = _check_next(step["next"], (*path, "next"), r)
    return info


def _check_step_spec(spec: Any, path: Path, r: Report) -> None:
    if spec is None:
        return
    if not isinstance(spec, dict):
        r.add(path, f"a step `spec` is a mapping of knobs and `policy`, found {type_name(spec)}")
        return
    check_pool(spec, path, r)
    check_step_spec(spec, path, r)
    for knob in LOOP_ONLY_KNOBS:
        if knob in spec:  # accepted and ignored before: the loop silently ran one at a time
            r.add(
                (*path, knob),
                f"`{knob}` is a loop knob: it goes in `loop.spec.{knob}` (a step's `spec` holds pool, "
                "timeout, max_task_runs, policy, ...; a step without `loop` runs once)",
            )
    if "next_mode" in spec:
        r.add((*path, "next_mode"), legacy.NEXT_MODE)
    check_no_control(spec, path, "step policy", r)
    policy = spec.get("policy")
    if policy is None:
        _closed_step_spec(spec, path, r)
        return
    if not isinstance(policy, dict):
        r.add(
            (*path, "policy"),
            f"a step `spec.policy` is a mapping (admit, failure, ...), found {type_name(policy)}",
        )
        _closed_step_spec(spec, path, r)
        return
    ppath = (*path, "policy")
    if "rules" in policy and not contains_control(policy["rules"]):
        r.add(
            (*ppath, "rules"),
            "a step policy has no `rules`: admission rules go in `spec.policy.admit.rules`, "
            "outcome handling in `task.spec.policy.rules`",
        )
    if "admit" in policy:
        _check_admit(policy["admit"], (*ppath, "admit"), r)
    failure = policy.get("failure")
    if failure is not None and not (
        isinstance(failure, dict) and failure.get("mode", "fail_fast") in FAILURE_MODES
    ):  # a misspelt key of `failure` is reported below, with the key meant
        r.add(
            (*ppath, "failure"), f"`failure` is `{{mode: fail_fast|best_effort}}`, found {describe(failure)}"
        )
    elif isinstance(failure, dict):
        check_closed(failure, (*ppath, "failure"), FAILURE_KEYS, "`failure`", r, elsewhere=False)
    if policy.get("lifecycle") is not None:
        check_lifecycle(policy["lifecycle"], (*ppath, "lifecycle"), r)
    check_limits(policy.get("limits"), (*ppath, "limits"), False, r)
    check_closed(policy, ppath, STEP_POLICY_KEYS, "a step's `spec.policy`", r, scope="step.spec.policy")
    _closed_step_spec(spec, path, r)


def _closed_step_spec(spec: dict[str, Any], path: Path, r: Report) -> None:
    if (keys := spec_keys()) is not None:
        check_closed(spec, path, keys, "a step's `spec`", r)


def _check_admit(admit: Any, path: Path, r: Report) -> None:
    if not isinstance(admit, dict):
        r.add(path, f"`admit` is a mapping with `rules`, found {type_name(admit)}")
        return
    check_closed(admit, path, ADMIT_KEYS, "`admit`", r, elsewhere=False)
    if admit.get("mode", "exclusive") not in NEXT_MODES:
        r.add((*path, "mode"), f"admission `mode` is exclusive or inclusive, found {describe(admit['mode'])}")
    if "rules" not in admit:
        r.add(
            path,
            "`admit` needs `rules`: `[{when: ..., then: {allow: true}}, {else: {then: {allow: false}}}]`",
        )
        return
    for _, parts in read_rules(admit["rules"], (*path, "rules"), r):
        then = parts.then
        if not isinstance(then, dict):
            r.add(parts.then_path, f"an admission `then` is `{{allow: true|false}}`, found {type_name(then)}")
            continue
        if not isinstance(then.get("allow"), bool):
            r.add(parts.then_path, "an admission rule's `then` needs `allow: true` or `allow: false`")
        for key in then:
            if key not in ("allow", "do"):  # `do` is reported by the control-action check
                r.add(
                    (*parts.then_path, key),
                    f"unknown key {describe(key)} in an admission `then`: it has only `allow`",
                )


def _reducers(loop: Any, path: Path, r: Report) -> frozenset[str]:
    """The ctx keys ``loop.spec.policy.reducers`` declares (checked here, where they are read)."""
    spec = loop.get("spec") if isinstance(loop, dict) else None
    policy = spec.get("policy") if isinstance(spec, dict) else None
    if isinstance(policy, dict) and policy.get("exec", "distributed") not in ("distributed", "local"):
        r.add(
            (*path, "loop", "spec", "policy", "exec"),
            f"`exec` is `distributed` (one command per iteration) or `local` (the whole loop on one "
            f"worker), found {describe(policy['exec'])}",
        )
    if not isinstance(policy, dict) or "reducers" not in policy:
        return frozenset()
    return check_reducers(policy["reducers"], (*path, "loop", "spec", "policy", "reducers"), r)


def _mode_knobs(source: dict[str, Any], path: Path, r: Report) -> tuple[Any, Any]:
    mode, cap = source.get("mode"), source.get("max_in_flight")
    if mode is not None and mode not in LOOP_MODES:
        r.add((*path, "mode"), f"loop mode is sequential or parallel, found {describe(mode)}")
    if cap is not None and not (isinstance(cap, int) and not isinstance(cap, bool) and cap >= 1):
        r.add(
            (*path, "max_in_flight"), f"`max_in_flight` is a whole number, at least 1, found {describe(cap)}"
        )
    return mode, cap


def _check_iterator(loop: dict[str, Any], path: Path, r: Report) -> None:
    """The iterator's name: it must not hide what `iter` already holds."""
    iterator = loop.get("iterator")
    if "iterator" not in loop:
        r.add(
            path,
            "the loop needs `iterator`: the name each element takes in `iter` "
            "(`iterator: item` gives `{{ iter.item }}`)",
        )
    elif not isinstance(iterator, str) or not ITERATOR_NAME.match(iterator):
        r.add((*path, "iterator"), f"`iterator` is a plain name such as `item`, found {describe(iterator)}")
    elif iterator == "index":
        r.add((*path, "iterator"), "`iterator` cannot be `index`: `iter.index` is the iteration number")
    elif iterator == "parent":
        r.add(
            (*path, "iterator"),
            "`iterator` cannot be `parent`: `iter.parent` is the calling loop iteration of a child playbook "
            "(SEMANTICS §19), which this name would hide: choose another name",
        )


def _check_loop(loop: Any, path: Path, r: Report) -> bool:
    """Check ``loop``; True when its iterations run in parallel."""
    if not isinstance(loop, dict):
        r.add(
            path,
            f"`loop` is a mapping `{{in: ..., iterator: ..., spec: {{mode: ...}}}}`, found {type_name(loop)}",
        )
        return False
    for key in loop:
        if key in ("mode", "max_in_flight"):
            r.add((*path, key), f"`loop.{key}` goes in `loop.spec.{key}`")
        elif key not in LOOP_KEYS:
            r.add((*path, key), f"unknown loop key {describe(key)}: a loop has {', '.join(LOOP_KEYS)}")
    if "in" not in loop:
        r.add(path, 'the loop needs `in`: the list to iterate, e.g. `in: "{{ workload.items }}"`')
    elif not isinstance(loop["in"], str | list):
        r.add((*path, "in"), f"`loop.in` is a template (or a literal list), found {type_name(loop['in'])}")
    _check_iterator(loop, path, r)
    spec = loop.get("spec")
    if spec is None:
        return False
    if not isinstance(spec, dict):
        r.add(
            (*path, "spec"),
            f"`loop.spec` is a mapping (mode, max_in_flight, policy), found {type_name(spec)}",
        )
        return False
    check_no_control(spec, (*path, "spec"), "loop policy", r)
    check_loop_spec(spec, (*path, "spec"), r)
    mode, cap = _mode_knobs(spec, (*path, "spec"), r)
    policy = spec.get("policy")
    if (keys := spec_keys(*LOOP_SPEC_KEYS)) is not None:
        check_closed(spec, (*path, "spec"), keys, "`loop.spec`", r)
    if isinstance(policy, dict):
        ppath = (*path, "spec", "policy")
        check_limits(policy.get("limits"), (*ppath, "limits"), False, r)
        check_closed(policy, ppath, LOOP_POLICY_KEYS, "`loop.spec.policy`", r, scope="loop.spec.policy")
        pmode, pcap = _mode_knobs(policy, (*path, "spec", "policy"), r)
        for key, outer, inner in (("mode", mode, pmode), ("max_in_flight", cap, pcap)):
            if outer is not None and inner is not None and outer != inner:
                r.add(
                    (*path, "spec", "policy", key),
                    f"`loop.spec.{key}` and `loop.spec.policy.{key}` disagree "
                    f"({describe(outer)} vs {describe(inner)}): keep one",
                )
        mode = mode if mode is not None else pmode
    elif policy is not None:
        r.add((*path, "spec", "policy"), f"`loop.spec.policy` is a mapping, found {type_name(policy)}")
    return bool(mode == "parallel")


def _check_next(nxt: Any, path: Path, r: Report) -> list[tuple[Path, str]]:
    """Check the router; returns each arc's target with its path, for the workflow-level check."""
    if isinstance(nxt, list):
        r.add(path, legacy.NEXT_LIST)
        return []
    if not isinstance(nxt, dict):
        r.add(path, f"`next` is a router `{{spec: {{mode: ...}}, arcs: [...]}}`, found {type_name(nxt)}")
        return []
    for key in nxt:
        if key not in NEXT_KEYS:
            r.add((*path, key), f"unknown key {describe(key)} in `next`: it has spec and arcs")
    spec = nxt.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            r.add((*path, "spec"), f"`next.spec` is a mapping (mode, policy), found {type_name(spec)}")
        else:
            check_no_control(spec, (*path, "spec"), "next policy", r)
            if spec.get("mode", "exclusive") not in NEXT_MODES:
                r.add(
                    (*path, "spec", "mode"),
                    f"`next.spec.mode` is exclusive or inclusive, found {describe(spec['mode'])}",
                )
            check_closed(spec, (*path, "spec"), NEXT_SPEC_KEYS, "`next.spec`", r, scope="next.spec")
    arcs = nxt.get("arcs")
    if "arcs" not in nxt:
        r.add(path, "`next` needs `arcs`: `next: {arcs: [{step: <name>}]}`")
        return []
    if not isinstance(arcs, list) or not arcs:
        r.add(
            (*path, "arcs"),
            "`next.arcs` is a non-empty list of arcs `{step: <name>, when: ..., args: {...}}`",
        )
        return []
    out: list[tuple[Path, str]] = []
    for k, arc in enumerate(arcs):
        target = _check_arc(arc, (*path, "arcs", k), r)
        if target is not None:
            out.append(((*path, "arcs", k, "step"), target))
    return out


def _check_arc(arc: Any, path: Path, r: Report) -> str | None:
    if not isinstance(arc, dict):
        r.add(
            path, f"an arc is a mapping `{{step: <name>, when: ..., args: {{...}}}}`, found {type_name(arc)}"
        )
        return None
    for key in arc:
        if key == "then":
            r.add(
                (*path, key), "an arc has no `then`: it fires when its `when` is true and passes its `args`"
            )
        elif key not in ARC_KEYS:
            r.add((*path, key), f"unknown arc key {describe(key)}: an arc has {', '.join(ARC_KEYS)}")
    if "when" in arc:
        check_when(arc["when"], (*path, "when"), r)
    if arc.get("args") is not None and not isinstance(arc["args"], dict):
        r.add((*path, "args"), f"arc `args` is a mapping (the token payload), found {type_name(arc['args'])}")
    if arc.get("spec") is not None:
        if isinstance(arc["spec"], dict):
            check_no_control(arc["spec"], (*path, "spec"), "next policy", r)
            for key in arc["spec"]:  # spec 003 §2: `arc.spec (future)`
                if not r.has((*path, "spec", key)):
                    r.add(
                        (*path, "spec", key),
                        f"an arc's `spec` is reserved by the specification (spec 003 §2, future) and "
                        f"nothing reads it: remove {describe(key)} (an arc has `when` and `args`; the "
                        "router's mode is `next.spec.mode`)",
                    )
        else:
            r.add((*path, "spec"), f"arc `spec` is a mapping, found {type_name(arc['spec'])}")
    target = arc.get("step")
    if not isinstance(target, str) or not target:
        r.add(
            path if "step" not in arc else (*path, "step"), "an arc needs `step: <name of the target step>`"
        )
        return None
    return target
