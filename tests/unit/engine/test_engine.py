"""The engine on its own: no NATS, no worker; decisions checked event by event."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from noetl.engine import fold
from tests.unit.engine.helpers import Driver, answer

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, path: t}\n"


def pb(body: str) -> str:
    return HEAD + body


LINEAR = pb("""
workflow:
  - step: start
    next: {arcs: [{step: a, args: {n: 1}}]}
  - step: a
    tool: {kind: noop}
    next: {arcs: [{step: b, args: {n: "{{ args.n + 1 }}"}}]}
  - step: b
    tool: {kind: noop}
""")


def test_router_start_schedules_next_step_with_rendered_args() -> None:
    d = Driver(LINEAR)
    assert d.names()[:5] == [
        "playbook.execution.requested",
        "playbook.request.evaluated",
        "workflow.started",
        "step.scheduled",
        "step.done",
    ]
    cmds = d.take()
    assert [c["step"] for c in cmds] == ["a"] and cmds[0]["args"] == {"n": 1}
    d.feed(answer(cmds[0], result=5))
    cmds = d.take()
    assert cmds[0]["step"] == "b" and cmds[0]["args"] == {"n": 2}


def test_execution_result_is_last_leaf_and_status_success() -> None:
    d = Driver(LINEAR)
    d.run_all(lambda c: {"result": c["step"]})
    assert d.state.finished and d.state.status == "success" and d.state.result == "b"
    assert d.names()[-2:] == ["workflow.finished", "playbook.processed"]


def test_ctx_patches_apply_at_terminal_event_and_flow_into_later_commands() -> None:
    d = Driver(LINEAR)
    (cmd,) = d.take()
    d.feed(answer(cmd, patches=[{"x": 1}, {"y": 2}]))
    (cmd2,) = d.take()
    assert cmd2["ctx"] == {"x": 1, "y": 2}


def test_unhandled_failure_fails_execution_and_stops_arcs() -> None:
    d = Driver(
        LINEAR.replace("{step: b, args:", "{step: b, when: \"{{ event.name == 'step.done' }}\", args:")
    )
    d.run_all(lambda c: {"ok": False})
    assert d.state.status == "failed" and d.state.error["kind"] == "python_error"
    assert "b" not in [r.step for r in d.state.runs.values()]


def test_failure_routed_by_arc_is_handled() -> None:
    d = Driver(
        pb("""
workflow:
  - step: start
    tool: {kind: noop}
    next:
      arcs:
        - {step: cleanup, when: "{{ event.name == 'step.failed' and event.error.kind == 'python_error' }}"}
  - step: cleanup
    tool: {kind: noop}
""")
    )
    d.run_all(lambda c: {"ok": c["step"] != "start"})
    assert d.state.status == "success"


def test_inclusive_fan_out_and_exclusive_first_match() -> None:
    d = Driver(
        pb("""
workload: {n: 5}
workflow:
  - step: start
    next:
      spec: {mode: inclusive}
      arcs:
        - {step: a, when: "{{ workload.n > 1 }}"}
        - {step: b, when: "{{ workload.n > 2 }}"}
        - {step: c, when: "{{ workload.n > 100 }}"}
  - {step: a, tool: {kind: noop}}
  - {step: b, tool: {kind: noop}}
  - {step: c, tool: {kind: noop}}
""")
    )
    assert sorted(c["step"] for c in d.take()) == ["a", "b"]


def test_admission_skip_consumes_token_without_failure() -> None:
    d = Driver(
        pb("""
workload: {on: false}
workflow:
  - step: start
    next: {arcs: [{step: gated}]}
  - step: gated
    spec:
      policy:
        admit:
          rules: [{when: "{{ workload.on }}", then: {allow: true}}, {else: {then: {allow: false}}}]
    tool: {kind: noop}
""")
    )
    assert "step.skipped" in d.names() and d.state.status == "success" and not d.commands


def test_keychain_missing_fails_before_workflow_started() -> None:
    d = Driver(pb("workflow:\n  - {step: start, tool: {kind: noop}}\n"), missing=["nope"])
    assert "workflow.started" not in d.names()
    assert d.state.status == "failed" and d.state.error["kind"] == "keychain_unresolved"
    assert "nope" in d.state.error["message"]


LOOP = pb("""
workload: {items: [1, 2, 3, 4, 5]}
workflow:
  - step: start
    spec: {policy: {failure: {mode: %s}}}
    loop: {in: "{{ workload.items }}", iterator: x, spec: {mode: parallel, max_in_flight: 2}}
    tool: {kind: noop}
    next: {arcs: [{step: after, when: "{{ event.name == 'loop.done' }}", args: {r: "{{ event.result }}"}}]}
  - {step: after, tool: {kind: noop}}
""")


def test_parallel_loop_respects_cap_and_orders_results() -> None:
    d = Driver(LOOP % "fail_fast")
    first = d.take()
    assert [c["index"] for c in first] == [0, 1]
    # answer out of order
    d.feed(answer(first[1], result=20))
    d.feed(answer(first[0], result=10))
    d.run_all(lambda c: {"result": (c["index"] + 1) * 10} if c["step"] == "start" else {})
    after = next(r for r in d.state.runs.values() if r.step == "after")
    assert after.args == {"r": [10, 20, 30, 40, 50]}
    assert d.names().count("loop.done") == 1


def test_fail_fast_stops_new_iterations() -> None:
    d = Driver(LOOP % "fail_fast")
    d.run_all(lambda c: {"ok": c["index"] != 0})
    assert d.state.status == "failed"
    assert sum(1 for e in d.log if e["name"] == "loop.iteration.done") <= 2
    assert d.state.runs[next(iter(d.state.runs))].loop.next_index == 2


def test_best_effort_runs_everything_with_counts() -> None:
    d = Driver(LOOP % "best_effort")
    d.run_all(lambda c: {"ok": c.get("index") != 2, "result": c.get("index")})
    done = next(e for e in d.log if e["name"] == "loop.done")
    assert done["payload"]["total"] == 5 and done["payload"]["failed"] == 1
    assert done["payload"]["result"] == [0, 1, None, 3, 4]


def test_loop_in_not_list_fails_step() -> None:
    d = Driver(
        pb("""
workload: {x: nope}
workflow:
  - step: start
    loop: {in: "{{ workload.x }}", iterator: i}
    tool: {kind: noop}
""")
    )
    assert d.state.status == "failed" and d.state.error["kind"] == "loop_in_not_list"


def test_duplicate_terminal_event_is_ignored() -> None:
    d = Driver(LINEAR)
    (cmd,) = d.take()
    ev = answer(cmd)
    d.feed(ev)
    assert d.feed(ev).events == [] and d.feed(ev).commands == []


def test_replay_rebuilds_identical_state_and_decisions() -> None:
    d = Driver(LOOP % "best_effort")
    d.run_all(lambda c: {"ok": c.get("index") != 3, "result": c.get("index"), "patches": []})
    a, b = fold(d.log), fold(d.log)
    for st in (a, b):
        assert st is not None
        assert (st.status, st.result, st.ctx, st.run_counter) == (
            d.state.status,
            d.state.result,
            d.state.ctx,
            d.state.run_counter,
        )
    from noetl.engine import replay

    _, decisions = replay(d.log)
    regenerated = [e["event_id"] for dec in decisions for e in dec.events]
    recorded = [
        e["event_id"]
        for e in d.log
        if e["source"] == "server" and e["name"] != "playbook.execution.requested"
    ]
    assert regenerated == recorded


def test_engine_imports_no_io() -> None:
    """The engine package may not import I/O, clocks or randomness."""
    root = Path(str(sys.modules["noetl.engine"].__file__)).parent
    banned = {"nats", "httpx", "asyncpg", "duckdb", "asyncio", "time", "random", "datetime", "os", "socket"}
    for f in root.glob("*.py"):
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for n in names:
                assert n.split(".")[0] not in banned, f"{f.name} imports {n}"
