"""Reducers (SEMANTICS §20): the combine rules, validation of `loop.spec.policy.reducers`, the fold
applying them in log order, replay reproducing them, and `reducer_type`."""

from __future__ import annotations

import pytest

from noetl.dsl import validate_text
from noetl.dsl.analysis import check_text
from noetl.dsl.errors import ReducerTypeError
from noetl.dsl.reducers import _MISSING, apply_reduced, combine
from noetl.engine import fold
from tests.unit.engine.helpers import Driver, answer


@pytest.mark.parametrize(
    "op, current, value, want",
    [
        ("sum", _MISSING, 5, 5),
        ("sum", 2, 3.5, 5.5),
        ("min", _MISSING, 7, 7),
        ("min", 3, 7, 3),
        ("max", 3, 7, 7),
        ("count", _MISSING, "anything", 1),
        ("count", 4, None, 5),
        ("append", _MISSING, [1], [[1]]),
        ("append", [0], {"a": 1}, [0, {"a": 1}]),
        ("extend", _MISSING, [1, 2], [1, 2]),
        ("extend", [0], [1], [0, 1]),
        ("merge", _MISSING, {"a": 1}, {"a": 1}),
        ("merge", {"a": {"x": 1}, "b": 2}, {"a": {"y": 2}}, {"a": {"x": 1, "y": 2}, "b": 2}),
    ],
)
def test_combine(op: str, current: object, value: object, want: object) -> None:
    assert combine(op, current, value, "here") == want


@pytest.mark.parametrize(
    "op, current, value",
    [
        ("sum", _MISSING, "5"),
        ("sum", "x", 1),
        ("min", 1, True),
        ("count", "x", 1),
        ("extend", [], 1),
        ("append", {"a": 1}, 1),
        ("merge", _MISSING, [1]),
        ("merge", 3, {"a": 1}),
    ],
)
def test_combine_type_errors(op: str, current: object, value: object) -> None:
    with pytest.raises(ReducerTypeError) as e:
        combine(op, current, value, "loop step 's', iteration 0: ctx key 'k'")
    assert (
        e.value.kind == "reducer_type" and f"reducer `{op}`" in e.value.message and "'k'" in e.value.message
    )


def test_apply_reduced_is_all_or_nothing_and_leaves_other_keys_plain() -> None:
    ctx = {"total": 1, "other": "x"}
    out = apply_reduced(ctx, [{"total": 2, "other": "y"}, {"total": 3}], {"total": "sum"}, "w")
    assert out == {"total": 6, "other": "y"} and ctx == {"total": 1, "other": "x"}
    with pytest.raises(ReducerTypeError):
        apply_reduced(ctx, [{"total": 2}, {"total": "bad"}], {"total": "sum"}, "w")


def _loop(mode: str, reducers: str, set_ctx: str) -> str:
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: r}}
workflow:
  - step: start
    loop:
      in: [1, 2, 3]
      iterator: n
      spec:
        mode: {mode}
        policy: {{reducers: {reducers}}}
    tool:
      - name: t
        kind: noop
        result: "{{{{ iter.n }}}}"
        spec:
          policy:
            rules:
              - else: {{then: {{set_ctx: {set_ctx}}}}}
"""


def test_a_parallel_loop_may_set_ctx_declared_keys_only() -> None:
    assert validate_text(_loop("parallel", "{total: sum}", "{total: 1}")) == []
    problems = validate_text(_loop("parallel", "{total: sum}", "{total: 1, seen: 2}"))
    assert len(problems) == 1 and "`set_ctx` of seen" in problems[0].message
    assert "loop.spec.policy.reducers" in problems[0].message and problems[0].line == 20


def test_reducers_are_checked() -> None:
    problems = validate_text(_loop("parallel", "{total: average}", "{total: 1}"), "t.yaml")
    paths = {p.path: p.message for p in problems}
    assert (
        "sum, min, max, count, append, extend, merge" in paths["workflow[0].loop.spec.policy.reducers.total"]
    )
    problems = validate_text(_loop("parallel", "[total]", "{total: 1}"), "t.yaml")
    assert any(p.path == "workflow[0].loop.spec.policy.reducers" for p in problems)
    bad_exec = _loop("sequential", "{}", "{a: 1}").replace("policy: {reducers: {}}", "policy: {exec: remote}")
    assert any("`exec` is `distributed`" in p.message for p in validate_text(bad_exec))


def test_check_warns_when_a_sequential_loop_would_race_if_made_parallel() -> None:
    result = check_text(_loop("sequential", "{total: sum}", "{total: 1, seen: 2}"), "t.yaml")
    races = [f for f in result.warnings if f.code == "ctx-race-if-parallel"]
    assert [f.path for f in races] == ["workflow[0].tool[0].spec.policy.rules[0].else.then.set_ctx.seen"]
    assert "seen: sum" in races[0].message


def _run(text: str, values: dict[int, object], order: list[int]) -> Driver:
    d = Driver(text)
    cmds = {c["index"]: c for c in d.take()}
    for i in order:
        d.feed(answer(cmds[i], result=values[i], patches=[{"total": values[i], "seen": values[i]}]))
        cmds.update({c["index"]: c for c in d.take()})
    return d


def test_the_fold_applies_reducers_in_log_order_and_replay_reproduces_them() -> None:
    text = _loop("parallel", "{total: sum, seen: append}", "{total: 1, seen: 1}")
    d = _run(text, {0: 1, 1: 2, 2: 3}, [2, 0, 1])
    assert d.state.ctx == {"total": 6, "seen": [3, 1, 2]}
    assert "loop.done" in d.names()
    again = fold(d.log)
    assert again is not None and again.ctx == d.state.ctx


def test_sequential_loops_apply_declared_reducers_too() -> None:
    text = _loop("sequential", "{total: max}", "{total: 1}")
    d = _run(text, {0: 5, 1: 2, 2: 4}, [0, 1, 2])
    assert d.state.ctx == {"total": 5, "seen": 4}  # `seen` has no reducer: the last write wins


def test_a_value_of_the_wrong_type_fails_the_iteration_with_reducer_type() -> None:
    text = _loop("parallel", "{total: sum, seen: sum}", "{total: 1, seen: 1}")
    d = _run(text, {0: 1, 1: "two", 2: 3}, [0, 1, 2])
    assert d.state.ctx == {"total": 4, "seen": 4}  # nothing of the failed iteration is applied
    failed = next(e for e in d.log if e["name"] == "step.failed")
    assert failed["payload"]["error"]["kind"] == "reducer_type"
    assert failed["payload"]["failed"] == 1 and "iteration 1" in failed["payload"]["error"]["message"]
