"""The net analysis: reachability, ends, joins, dead arcs. Each rule has a playbook that should
trigger it and one that should not."""

from __future__ import annotations

from tests.unit.analysis.helpers import codes, findings, only

NOOP = "tool: {kind: noop}"


def test_unreachable_step() -> None:
    wf = f"""
    - step: start
      {NOOP}
    - step: orphan
      {NOOP}
    """
    (f,) = only(wf, "unreachable-step")
    assert f.severity == "warning" and f.line == 7 and "`orphan`" in f.message
    assert (
        codes(
            wf.replace(
                "      tool: {kind: noop}\n    - step: orphan",
                "      next: {arcs: [{step: orphan}]}\n    - step: orphan",
                1,
            )
        )
        == []
    )


def test_step_behind_a_dead_arc_is_unreachable() -> None:
    wf = f"""
    - step: start
      {NOOP}
      next:
        arcs:
          - step: after
            when: "{{{{ false }}}}"
    - step: after
      {NOOP}
    """
    assert set(codes(wf)) == {"arc-never-fires", "unreachable-step"}


def test_no_end_cycle() -> None:
    wf = f"""
    - step: start
      next: {{arcs: [{{step: ping}}]}}
    - step: ping
      {NOOP}
      next: {{arcs: [{{step: pong}}]}}
    - step: pong
      {NOOP}
      next: {{arcs: [{{step: ping}}]}}
    """
    (f,) = only(wf, "no-end")
    assert f.severity == "error" and "`ping` → `pong` → `ping`" in f.message and f.path == "workflow[1]"
    guarded = wf.replace(
        "next: {arcs: [{step: ping}]}", 'next: {arcs: [{step: ping, when: "{{ ctx.again }}"}]}'
    )
    assert "no-end" not in codes(guarded)


def test_a_cycle_through_failure_arcs_only_still_ends() -> None:
    # the arc back fires only on step.done: a failure ends the token (and the execution)
    wf = f"""
    - step: start
      {NOOP}
      next: {{arcs: [{{step: start, when: "{{{{ event.name == 'step.done' }}}}"}}]}}
    """
    assert "no-end" not in codes(wf)


JOIN = """
- step: start
  next:
    spec: {mode: inclusive}
    arcs:
      - step: branch_a
      - step: branch_b
- step: branch_a
  tool:
    - name: mark
      kind: noop
      spec:
        policy:
          rules:
            - else: {then: {do: continue, set_ctx: {a_done: true}}}
  next: {arcs: [{step: join}]}
- step: branch_b
  tool:
    - name: mark
      kind: noop
      spec:
        policy:
          rules:
            - else: {then: {do: continue, set_ctx: {B_FLAG: true}}}
  next: {arcs: [{step: join}]}
- step: join
  spec:
    policy:
      admit:
        rules:
          - when: "{{ ctx.a_done | default(false) and ctx.b_done | default(false) }}"
            then: {allow: true}
          - else: {then: {allow: false}}
  tool: {kind: noop}
"""


def test_join_that_can_never_admit() -> None:
    (f,) = only(JOIN, "admission-never-allows")
    assert f.severity == "error" and f.path == "workflow[3].spec.policy.admit"
    assert "inclusive fan-out at `start`" in f.message and "nothing writes ctx.b_done" in f.message
    assert codes(JOIN.replace("B_FLAG", "b_done")) == []


def test_join_written_only_downstream_or_with_a_value_that_denies() -> None:
    late = (
        JOIN.replace("B_FLAG", "other")
        + """\
  next: {arcs: [{step: late}]}
- step: late
  tool:
    - name: mark
      kind: noop
      spec:
        policy:
          rules:
            - else: {then: {do: continue, set_ctx: {b_done: true}}}
"""
    )
    (f,) = only(late, "admission-never-allows")
    assert "written only by `late`, which cannot run before `join`" in f.message
    false_flag = JOIN.replace("B_FLAG: true", "b_done: false")
    assert "admission-never-allows" in codes(false_flag)
    templated = JOIN.replace("B_FLAG: true", "b_done: \"{{ outcome.status == 'ok' }}\"")
    assert "admission-never-allows" not in codes(templated)


def test_arc_on_loop_done_of_a_step_without_loop() -> None:
    wf = f"""
    - step: start
      {NOOP}
      next:
        arcs:
          - step: done
            when: "{{{{ event.name == 'loop.done' }}}}"
          - step: done
    - step: done
      {NOOP}
    """
    (f,) = only(wf, "arc-never-fires")
    assert f.path == "workflow[0].next.arcs[0].when" and f.line == 10
    assert "tests for loop.done, but step `start` has no loop" in f.message


def test_arc_on_step_done_of_a_loop_step_and_the_right_one() -> None:
    wf = f"""
    - step: start
      loop: {{in: [1, 2], iterator: x}}
      {NOOP}
      next:
        arcs:
          - step: ok
            when: "{{{{ event.name == 'step.done' }}}}"
          - step: ok
            when: "{{{{ event.name == 'loop.done' }}}}"
    - step: ok
      {NOOP}
    """
    (f,) = only(wf, "arc-never-fires")
    assert f.path == "workflow[0].next.arcs[0].when" and "is a loop step" in f.message


def test_arc_shadowed_by_an_unconditional_exclusive_arc() -> None:
    wf = f"""
    - step: start
      {NOOP}
      next:
        arcs:
          - step: a
          - step: b
            when: "{{{{ workload.x }}}}"
    - step: a
      {NOOP}
    - step: b
      {NOOP}
    """
    dead = only(wf, "arc-never-fires")
    assert [f.path for f in dead] == ["workflow[0].next.arcs[1].when"] and "earlier arc" in dead[0].message
    inclusive = wf.replace("        arcs:", "        spec: {mode: inclusive}\n        arcs:")
    assert codes(inclusive) == []


def test_error_routing_is_live() -> None:
    wf = f"""
    - step: start
      {NOOP}
      next:
        arcs:
          - step: cleanup
            when: "{{{{ event.name == 'step.failed' and event.error.kind == 'timeout' }}}}"
          - step: finish
            when: "{{{{ event.status == 'success' }}}}"
    - step: cleanup
      {NOOP}
    - step: finish
      {NOOP}
    """
    assert findings(wf) == []
