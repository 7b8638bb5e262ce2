"""Execution limits: an arc cycle and an oversized loop end the execution with their own kind."""

from __future__ import annotations

from tests.unit.engine.helpers import Driver

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"

CYCLE = (
    HEAD
    + """
executor: {spec: {policy: {limits: {max_step_runs: 50}}}}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: start}]}
"""
)


def test_an_arc_cycle_stops_at_max_step_runs() -> None:
    """Before: a -> a ran 21 060 step runs in 20 s and never ended by itself."""
    d = Driver(CYCLE)
    d.run_all(lambda c: {"result": 1})
    scheduled = d.names().count("step.scheduled")
    assert d.state.finished and d.state.status == "failed", d.state.status
    assert d.state.error["kind"] == "step_run_limit", d.state.error
    assert scheduled == 50, f"{scheduled} step runs scheduled, the limit is 50"
    assert "max_step_runs" in d.state.error["message"]


def test_the_default_limit_applies_without_a_setting() -> None:
    d = Driver(CYCLE.replace("executor: {spec: {policy: {limits: {max_step_runs: 50}}}}\n", ""))
    d.run_all(lambda c: {"result": 1})
    assert d.state.error["kind"] == "step_run_limit"
    assert d.names().count("step.scheduled") == 10_000


LOOP = (
    HEAD
    + """
executor: {spec: {policy: {limits: {max_loop_items: 10}}}}
workflow:
  - step: start
    loop: {in: "{{ range(N) | list }}", iterator: i}
    tool: {kind: noop}
"""
)


def test_a_loop_over_max_loop_items_fails_before_any_iteration() -> None:
    d = Driver(LOOP.replace("N", "11"))
    assert d.take() == [] and d.state.finished and d.state.error["kind"] == "loop_size_limit"
    ok = Driver(LOOP.replace("N", "10"))
    ok.run_all(lambda c: {"result": 1})
    assert ok.state.status == "success"


BYTES = (
    HEAD
    + """
executor: {spec: {policy: {limits: {max_event_bytes: 20000}}}}
workflow:
  - step: start
    loop: {in: "{{ range(1000) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 4}}
    tool: {kind: noop}
"""
)


def test_event_bytes_past_the_limit_fail_the_execution_and_start_nothing_new() -> None:
    d = Driver(BYTES)
    d.run_all(lambda c: {"result": "x" * 100})
    started = sum(1 for n in d.names() if n == "loop.iteration.done")
    assert d.state.status == "failed" and d.state.error["kind"] == "event_bytes_limit", d.state.error
    assert 0 < started < 1000, f"{started} iterations ran"
    again = Driver(BYTES)  # deterministic: the same events, the same point
    again.run_all(lambda c: {"result": "x" * 100})
    assert again.names() == d.names()
