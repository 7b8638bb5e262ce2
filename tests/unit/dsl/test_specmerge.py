"""Spec layering (SEMANTICS §14): merge rules, precedence of the scopes, and policies that stay
in their scope."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from noetl.dsl.model import Loop, Metadata, Playbook, Step, Task
from noetl.dsl.specmerge import (
    BASE_DEFAULTS,
    KIND_DEFAULTS,
    deep_merge,
    effective_step_spec,
    effective_task_spec,
)


def task(kind: str = "http", spec: dict[str, Any] | None = None) -> Task:
    return Task(name="call", kind=kind, config={}, spec=spec or {}, policy=None)


def step(
    spec: dict[str, Any] | None = None, loop_spec: dict[str, Any] | None = None, tool: tuple[Task, ...] = ()
) -> Step:
    loop = None if loop_spec is None else Loop(in_="{{ workload.xs }}", iterator="x", spec=loop_spec)
    return Step(
        name="s",
        desc=None,
        spec=spec or {},
        admit=None,
        failure_mode="fail_fast",
        loop=loop,
        tool=tool,
        next=None,
    )


def playbook(executor_spec: dict[str, Any] | None = None) -> Playbook:
    executor = {} if executor_spec is None else {"spec": executor_spec}
    return Playbook(
        metadata=Metadata(name="t"), keychain=(), executor=executor, workload={}, workflow=(), workbook={}
    )


# --- deep_merge ------------------------------------------------------------------------------


def test_scalars_from_over_win_maps_merge_lists_replace() -> None:
    base = {"a": 1, "m": {"x": 1, "y": {"p": 1}}, "l": [1, 2], "keep": "k"}
    over = {"a": 2, "m": {"y": {"q": 2}, "z": 3}, "l": [3]}
    assert deep_merge(base, over) == {
        "a": 2,
        "m": {"x": 1, "y": {"p": 1, "q": 2}, "z": 3},
        "l": [3],
        "keep": "k",
    }


def test_none_and_type_changes_replace() -> None:
    assert deep_merge({"t": {"read": 1}}, {"t": None}) == {"t": None}
    assert deep_merge({"t": {"read": 1}}, {"t": 5}) == {"t": 5}
    assert deep_merge({"t": 5}, {"t": {"read": 1}}) == {"t": {"read": 1}}
    assert deep_merge({"l": [1]}, {"l": {"a": 1}}) == {"l": {"a": 1}}


def test_inputs_are_not_mutated_and_the_result_shares_nothing() -> None:
    base = {"m": {"x": [1, {"deep": 1}]}, "only_base": {"k": [1]}}
    over = {"m": {"y": {"z": [2]}}, "only_over": {"k": [2]}}
    snapshot = copy.deepcopy((base, over))
    out = deep_merge(base, over)
    out["m"]["x"][1]["deep"] = 99
    out["m"]["y"]["z"].append(3)
    out["only_base"]["k"].append(9)
    out["only_over"]["k"].append(9)
    assert (base, over) == snapshot


json_maps = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.sampled_from("abc"), kids, max_size=3),
    max_leaves=10,
).filter(lambda v: isinstance(v, dict))


@given(json_maps, json_maps)
def test_merge_properties(base: dict[str, Any], over: dict[str, Any]) -> None:
    out = deep_merge(base, over)
    assert set(out) == set(base) | set(over)
    for key, value in over.items():
        if not (isinstance(value, dict) and isinstance(base.get(key), dict)):
            assert out[key] == value
    assert deep_merge(out, over) == out  # laying the same layer again changes nothing
    assert deep_merge({}, base) == base and deep_merge(base, {}) == base


# --- defaults --------------------------------------------------------------------------------


def test_kind_defaults() -> None:
    assert KIND_DEFAULTS["http"]["timeout"] == {"connect": 10, "read": 30}
    assert KIND_DEFAULTS["python"]["timeout"] is None
    for kind in ("http", "python", "noop", "postgres", "duckdb", "playbook", "workbook", "secrets"):
        assert KIND_DEFAULTS[kind]["max_task_runs"] == 10_000
        assert KIND_DEFAULTS[kind]["policy"] == {"limits": {"max_payload_bytes": 65_536}}


def test_unknown_kind_gets_the_base_defaults() -> None:
    assert effective_task_spec(playbook(), step(), task("plugin_kind")) == BASE_DEFAULTS


def test_returned_specs_do_not_alias_the_defaults() -> None:
    spec = effective_task_spec(playbook(), step(), task())
    spec["timeout"]["read"] = 1
    spec["policy"]["limits"]["max_payload_bytes"] = 1
    assert KIND_DEFAULTS["http"]["timeout"]["read"] == 30
    assert BASE_DEFAULTS["policy"]["limits"]["max_payload_bytes"] == 65_536


# --- layering --------------------------------------------------------------------------------


def test_each_inner_scope_wins() -> None:
    pb = playbook({"timeout": {"read": 1}, "knob": "executor", "only_exec": 1})
    st_ = step({"timeout": {"read": 2}, "knob": "step"}, loop_spec={"timeout": {"read": 3}, "knob": "loop"})
    assert effective_task_spec(pb, st_, task(spec={"knob": "task"})) == {
        "timeout": {"connect": 10, "read": 3},
        "knob": "task",
        "only_exec": 1,
        "max_task_runs": 10_000,
        "policy": {"limits": {"max_payload_bytes": 65_536}},
    }
    assert effective_task_spec(pb, st_, task())["knob"] == "loop"
    assert effective_task_spec(pb, step({"knob": "step"}), task())["knob"] == "step"
    assert effective_task_spec(pb, step(), task())["knob"] == "executor"


def test_conformance_spec_layering_timeout() -> None:
    """executor.spec.timeout.read flows down; a step's timeout overrides it; connect stays."""
    pb = playbook({"timeout": {"read": 0.3}})
    assert effective_task_spec(pb, step(), task())["timeout"] == {"connect": 10, "read": 0.3}
    overrides = step({"timeout": {"read": 10}})
    assert effective_task_spec(pb, overrides, task())["timeout"] == {"connect": 10, "read": 10}
    inner = task(spec={"timeout": {"connect": 5, "read": 15}})
    assert effective_task_spec(pb, overrides, inner)["timeout"] == {"connect": 5, "read": 15}


def test_only_limits_flow_out_of_outer_policies() -> None:
    pb = playbook(
        {
            "policy": {
                "limits": {"max_payload_bytes": 1000},
                "admit": {"rules": [{"else": {"then": {"allow": False}}}]},
                "failure": {"mode": "best_effort"},
                "rules": [{"else": {"then": {"do": "fail"}}}],
            }
        }
    )
    st_ = step(
        {"policy": {"admit": {"rules": []}, "failure": {"mode": "fail_fast"}}},
        loop_spec={"policy": {"mode": "parallel", "rules": []}},
    )
    spec = effective_task_spec(pb, st_, task(spec={"policy": {"rules": []}}))
    assert spec["policy"] == {"limits": {"max_payload_bytes": 1000}}
    assert effective_step_spec(pb, st_)["policy"] == {"limits": {"max_payload_bytes": 1000}}


def test_executor_without_spec_or_with_odd_values() -> None:
    pb = Playbook(
        metadata=Metadata(name="t"),
        keychain=(),
        executor={"spec": None},
        workload={},
        workflow=(),
        workbook={},
    )
    assert effective_task_spec(pb, step(), task("noop")) == KIND_DEFAULTS["noop"]


def test_step_spec_is_kind_independent() -> None:
    pb = playbook({"max_task_runs": 500, "pool": "gpu"})
    spec = effective_step_spec(pb, step({"max_task_runs": 50}))
    assert spec == {"max_task_runs": 50, "pool": "gpu", "policy": {"limits": {"max_payload_bytes": 65_536}}}
    assert "timeout" not in spec
    assert effective_step_spec(pb, step(loop_spec={"max_task_runs": 7}))["max_task_runs"] == 7
    assert effective_step_spec(playbook(), step()) == BASE_DEFAULTS


def test_layering_does_not_mutate_the_model() -> None:
    exec_spec = {"timeout": {"read": 1}, "policy": {"limits": {"max_payload_bytes": 5}, "admit": {}}}
    step_spec = {"timeout": {"connect": 2}}
    pb, st_ = playbook(exec_spec), step(step_spec, loop_spec={"x": [1]})
    tk = task(spec={"timeout": {"read": 9}})
    snapshot = copy.deepcopy((pb.executor, st_.spec, st_.loop.spec if st_.loop else None, tk.spec))
    spec = effective_task_spec(pb, st_, tk)
    spec["x"].append(2)
    spec["timeout"]["read"] = 0
    assert (pb.executor, st_.spec, st_.loop.spec if st_.loop else None, tk.spec) == snapshot
