"""Pipelines: unbounded jump cycles, tasks no path reaches, tasks every path jumps over."""

from __future__ import annotations

from tests.unit.analysis.helpers import codes, only


def _step(tasks: str, spec: str = "") -> str:
    return f"""
    - step: start
{spec}      tool:
{tasks}
    """


FETCH = """\
        - name: fetch
          kind: noop
        - name: paginate
          kind: noop
          spec:
            policy:
              rules:
                - when: "{{ _prev }}"
                  then: {do: jump, to: fetch}
                - else: {then: {do: jump, to: fetch}}
"""


def test_jump_cycle_without_a_way_out() -> None:
    (f,) = only(_step(FETCH), "jump-cycle-unbounded")
    assert f.severity == "error" and f.path == "workflow[0].tool[0]"
    assert "`fetch` → `paginate` → `fetch`" in f.message


def test_jump_cycle_with_break_retry_fail_or_an_explicit_limit() -> None:
    for way_out in ("{do: break}", "{do: fail}", "{do: retry, attempts: 3}", "{do: continue}"):
        assert (
            codes(
                _step(FETCH.replace("- else: {then: {do: jump, to: fetch}}", f"- else: {{then: {way_out}}}"))
            )
            == []
        )
    limited = _step(FETCH, "      spec: {max_task_runs: 50}\n")
    assert codes(limited) == []


def test_self_jump_and_on_unmatched() -> None:
    spin = """\
        - name: again
          kind: noop
          spec:
            policy:
              rules:
                - when: "{{ _attempt > 0 }}"
                  then: {do: jump, to: again}
"""
    # no `else`: on_unmatched (continue) leaves the cycle
    assert codes(_step(spin)) == []
    assert codes(_step(spin.replace("rules:", "on_unmatched: fail\n              rules:"))) == []
    always = spin.replace('when: "{{ _attempt > 0 }}"', 'when: "{{ true }}"')
    assert codes(_step(always)) == ["jump-cycle-unbounded"]


def test_task_after_an_unconditional_break_never_runs() -> None:
    tasks = """\
        - name: one
          kind: noop
          spec: {policy: {rules: [{else: {then: {do: break}}}]}}
        - name: two
          kind: noop
"""
    (f,) = only(_step(tasks), "task-unreachable")
    assert f.path == "workflow[0].tool[1]" and "`one` before it never continues" in f.message
    conditional = tasks.replace("[{else: {then: {do: break}}}]", '[{when: "{{ _prev }}", then: {do: break}}]')
    assert codes(_step(conditional)) == []


def test_label_every_path_jumps_over() -> None:
    tasks = """\
        - name: parse
          kind: python
          code: "def main(): return 1"
          spec:
            policy:
              rules:
                - when: "{{ outcome.status == 'error' }}"
                  then: {do: jump, to: fallback}
                - else: {then: {do: jump, to: done}}
        - name: skipped
          kind: noop
        - name: fallback
          kind: noop
        - name: done
          kind: noop
"""
    (f,) = only(_step(tasks), "task-jumped-over")
    assert f.path == "workflow[0].tool[1]" and "every path jumps over task `skipped`" in f.message
    assert "`fallback`" in f.message
    # a jump that targets it makes it reachable
    assert codes(_step(tasks.replace("to: done}}", "to: skipped}}"))) == []


def test_unreachable_steps_pipelines_are_not_analysed() -> None:
    wf = (
        _step("        - {name: a, kind: noop}")
        + """
    - step: orphan
      tool:
"""
        + FETCH
    )
    assert codes(wf) == ["unreachable-step"]
