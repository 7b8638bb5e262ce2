"""One case per validation rule (SEMANTICS §2), root to loop: each names its path and replacement."""

from __future__ import annotations

import pytest

from tests.unit.dsl.helpers import (
    NOOP_START,
    check_case,
    find,
    playbook,
    problems,
    steps,
    task_with_rules,
)

CASES: list[tuple[str, str, str, list[str]]] = [
    # --- root ---------------------------------------------------------------------------------
    (
        "api_version_wrong",
        playbook(header="apiVersion: noetl.io/v1\nkind: Playbook\nmetadata: {name: t}\n"),
        "apiVersion",
        ["noetl.io/v2", "noetl.io/v1"],
    ),
    (
        "api_version_missing",
        playbook(header="kind: Playbook\nmetadata: {name: t}\n"),
        "apiVersion",
        ["noetl.io/v2"],
    ),
    (
        "kind_wrong",
        playbook(header="apiVersion: noetl.io/v2\nkind: Workflow\nmetadata: {name: t}\n"),
        "kind",
        ["Playbook", "Workflow"],
    ),
    (
        "metadata_missing",
        playbook(header="apiVersion: noetl.io/v2\nkind: Playbook\n"),
        "metadata",
        ["metadata.name"],
    ),
    (
        "metadata_name_missing",
        playbook(header="apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {path: x}\n"),
        "metadata.name",
        ["metadata.name"],
    ),
    (
        "unknown_root_key",
        playbook("bogus: 1\n" + "workflow: [{step: start, tool: {kind: noop}}]\n"),
        "bogus",
        ["bogus", "workflow"],
    ),
    (
        "root_vars",
        playbook("vars: {x: 1}\nworkflow: [{step: start, tool: {kind: noop}}]\n"),
        "vars",
        ["workload", "ctx", "set_ctx"],
    ),
    ("workflow_missing", playbook("workload: {}\n"), "workflow", ["required"]),
    ("workflow_empty", playbook("workflow: []\n"), "workflow", ["empty"]),
    ("workflow_not_list", playbook("workflow: {step: start}\n"), "workflow", ["list"]),
    (
        "keychain_entry_without_name",
        steps(NOOP_START, root="keychain: [{kind: secret}]\n"),
        "keychain[0].name",
        ["name"],
    ),
    (
        "keychain_duplicate",
        steps(NOOP_START, root="keychain: [{name: a, kind: s}, {name: a, kind: s}]\n"),
        "keychain[1].name",
        ["twice"],
    ),
    (
        "executor_control",
        steps(NOOP_START, root="executor: {spec: {policy: {then: {do: retry}}}}\n"),
        "executor.spec.policy.then.do",
        ["task.spec.policy.rules"],
    ),
    # --- workflow -----------------------------------------------------------------------------
    (
        "duplicate_step",
        steps(
            "- step: start\n  next: {arcs: [{step: b}]}\n- step: b\n  tool: {kind: noop}\n"
            "- step: b\n  tool: {kind: noop}\n"
        ),
        "workflow[2]",
        ["'b'", "workflow[1]"],
    ),
    ("missing_start", steps("- step: begin\n  tool: {kind: noop}\n"), "workflow", ["start"]),
    (
        "arc_to_unknown_step",
        steps("- step: start\n  next: {arcs: [{step: nowhere}]}\n"),
        "workflow[0].next.arcs[0].step",
        ["nowhere"],
    ),
    (
        "step_not_mapping",
        steps("- step: start\n  tool: {kind: noop}\n- just a string\n"),
        "workflow[1]",
        ["mapping"],
    ),
    ("step_without_name", steps(NOOP_START + "- tool: {kind: noop}\n"), "workflow[1]", ["step: <name>"]),
    ("idle_step", steps("- step: start\n  desc: nothing\n"), "workflow[0]", ["tool", "next"]),
    ("unknown_step_key", steps(NOOP_START + "  color: red\n"), "workflow[0].color", ["color", "tool"]),
    # --- legacy step constructs ---------------------------------------------------------------
    ("step_when", steps(NOOP_START + '  when: "{{ true }}"\n'), "workflow[0].when", ["spec.policy.admit"]),
    ("step_case", steps(NOOP_START + "  case: []\n"), "workflow[0].case", ["next.arcs", "spec.policy.rules"]),
    (
        "step_retry",
        steps(NOOP_START + "  retry: {max_attempts: 3}\n"),
        "workflow[0].retry",
        ["spec.policy.rules", "do: retry"],
    ),
    (
        "step_sink",
        steps(NOOP_START + "  sink: {tool: {kind: postgres}}\n"),
        "workflow[0].sink",
        ["writes and returns a reference"],
    ),
    ("step_vars", steps(NOOP_START + "  vars: {a: 1}\n"), "workflow[0].vars", ["set_ctx", "set_iter"]),
    ("step_eval", steps(NOOP_START + "  eval: []\n"), "workflow[0].eval", ["spec.policy.rules", "when"]),
    (
        "next_mode",
        steps("- step: start\n  spec: {next_mode: inclusive}\n  tool: {kind: noop}\n"),
        "workflow[0].spec.next_mode",
        ["next.spec.mode"],
    ),
    ("next_list", steps("- step: start\n  next: [{step: start}]\n"), "workflow[0].next", ["next.arcs"]),
    (
        "next_without_arcs",
        steps("- step: start\n  tool: {kind: noop}\n  next: {spec: {mode: inclusive}}\n"),
        "workflow[0].next",
        ["arcs"],
    ),
    (
        "next_mode_value",
        steps("- step: start\n  next: {spec: {mode: all}, arcs: [{step: start}]}\n"),
        "workflow[0].next.spec.mode",
        ["exclusive", "inclusive"],
    ),
    (
        "arc_unknown_key",
        steps("- step: start\n  next: {arcs: [{step: start, data: {}}]}\n"),
        "workflow[0].next.arcs[0].data",
        ["data", "args"],
    ),
    (
        "next_control",
        steps("- step: start\n  next: {spec: {policy: {do: jump}}, arcs: [{step: start}]}\n"),
        "workflow[0].next.spec.policy.do",
        ["jump", "task.spec.policy.rules"],
    ),
    # --- step policy --------------------------------------------------------------------------
    (
        "control_in_admit",
        steps(
            "- step: start\n  spec:\n    policy:\n      admit:\n        rules:\n"
            "          - else: {then: {do: retry}}\n  tool: {kind: noop}\n"
        ),
        "workflow[0].spec.policy.admit.rules[0].else.then.do",
        ["retry", "task.spec.policy.rules"],
    ),
    (
        "step_policy_rules",
        steps("- step: start\n  spec: {policy: {rules: []}}\n  tool: {kind: noop}\n"),
        "workflow[0].spec.policy.rules",
        ["spec.policy.admit.rules", "task.spec.policy.rules"],
    ),
    (
        "admit_without_rules",
        steps("- step: start\n  spec: {policy: {admit: {mode: exclusive}}}\n  tool: {kind: noop}\n"),
        "workflow[0].spec.policy.admit",
        ["rules"],
    ),
    (
        "admit_then_without_allow",
        steps(
            "- step: start\n  spec: {policy: {admit: {rules: [{when: 'x', then: {}}]}}}\n"
            "  tool: {kind: noop}\n"
        ),
        "workflow[0].spec.policy.admit.rules[0].then",
        ["allow"],
    ),
    (
        "failure_mode",
        steps("- step: start\n  spec: {policy: {failure: {mode: sometimes}}}\n  tool: {kind: noop}\n"),
        "workflow[0].spec.policy.failure",
        ["fail_fast", "best_effort"],
    ),
    # --- loop -------------------------------------------------------------------------------
    (
        "loop_without_in",
        steps("- step: start\n  loop: {iterator: x}\n  tool: {kind: noop}\n"),
        "workflow[0].loop",
        ["`in`"],
    ),
    (
        "loop_without_iterator",
        steps("- step: start\n  loop: {in: [1]}\n  tool: {kind: noop}\n"),
        "workflow[0].loop",
        ["iterator"],
    ),
    (
        "loop_iterator_index",
        steps("- step: start\n  loop: {in: [1], iterator: index}\n  tool: {kind: noop}\n"),
        "workflow[0].loop.iterator",
        ["iter.index"],
    ),
    (
        "loop_mode_misplaced",
        steps("- step: start\n  loop: {in: [1], iterator: x, mode: parallel}\n  tool: {kind: noop}\n"),
        "workflow[0].loop.mode",
        ["loop.spec.mode"],
    ),
    (
        "loop_mode_conflict",
        steps(
            "- step: start\n  loop: {in: [1], iterator: x, spec: {mode: parallel, "
            "policy: {mode: sequential}}}\n  tool: {kind: noop}\n"
        ),
        "workflow[0].loop.spec.policy.mode",
        ["disagree"],
    ),
    (
        "loop_max_in_flight",
        steps(
            "- step: start\n  loop: {in: [1], iterator: x, spec: {max_in_flight: 0}}\n  tool: {kind: noop}\n"
        ),
        "workflow[0].loop.spec.max_in_flight",
        ["at least 1"],
    ),
    (
        "loop_control",
        steps(
            "- step: start\n  loop: {in: [1], iterator: x, spec: {policy: {then: {do: break}}}}\n"
            "  tool: {kind: noop}\n"
        ),
        "workflow[0].loop.spec.policy.then.do",
        ["break", "task.spec.policy.rules"],
    ),
]


@pytest.mark.parametrize(("text", "path", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(text: str, path: str, needles: list[str]) -> None:
    check_case(text, path, needles)


def test_every_problem_is_reported_at_once() -> None:
    text = steps(
        """\
        - step: start
          when: "{{ x }}"
          tool:
            - {name: a, kind: warp}
            - {name: a, kind: noop}
          next: {arcs: [{step: ghost}]}
        """,
        root="vars: {}\nbogus: 1\n",
    )
    paths = {p.path for p in problems(text)}
    assert {
        "vars",
        "bogus",
        "workflow[0].when",
        "workflow[0].tool[0].kind",
        "workflow[0].tool[1]",
        "workflow[0].next.arcs[0].step",
    } <= paths


def test_problems_come_in_file_order() -> None:
    text = steps("- step: start\n  tool: [{name: t, kind: warp}]\n", root="bogus: 1\n")
    lines = [p.line for p in problems(text)]
    assert lines == sorted(lines)


def test_lines_point_at_the_offending_key() -> None:
    text = task_with_rules(
        '- when: "{{ true }}"\n  then: {do: retry}\n- else:\n    then: {do: jump, to: nowhere}'
    )
    problem = find(problems(text), "workflow[0].tool[0].spec.policy.rules[1].else.then.to")
    assert text.splitlines()[problem.line - 1].strip().startswith("then: {do: jump, to: nowhere}")


@pytest.mark.parametrize(
    "text",
    [
        task_with_rules("- when: true\n  then: {do: continue}"),
        task_with_rules("- else: null\n  then: {do: continue}"),
        task_with_rules(
            '- when: "{{ outcome.status == \'error\' }}"\n  then: {do: retry, attempts: "{{ 2 }}", '
            "backoff: linear, delay: 0.5, max_delay: 2}\n- else: {then: {set_ctx: {a: 1}}}"
        ),
        steps(
            "- step: start\n  loop: {in: [1, 2], iterator: x, spec: {mode: parallel}}\n"
            "  tool: [{name: t, kind: noop, spec: {policy: {rules: [{else: {then: {set_iter: {a: 1}}}}]}}}]\n"
        ),
        steps(
            "- step: start\n  tool: {kind: noop}\n",
            root="keychain: [{name: k, kind: secret}]\n"
            "executor: {spec: {timeout: 3}}\nworkload: {x: 1}\nworkbook: {tasks: {w: {kind: noop}}}\n",
        ),
        steps(
            "- step: start\n  tool: {name: custom, kind: noop}\n"
            "  next: {arcs: [{step: start, when: false}]}\n"
        ),
    ],
)
def test_valid_variants_have_no_problems(text: str) -> None:
    assert problems(text) == []


def test_loop_knobs_on_a_step_name_the_right_place() -> None:
    """Before: `spec: {mode: parallel, max_in_flight: 4}` on the step validated and the loop ran
    one iteration at a time."""
    from noetl.dsl import validate_text

    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: k, path: t/k}\nworkflow:\n"
        "  - step: start\n    spec: {mode: parallel, max_in_flight: 4}\n"
        '    loop: {in: "{{ [1, 2] }}", iterator: i}\n    tool: {kind: noop}\n'
    )
    problems = [str(p) for p in validate_text(text, "k.yaml")]
    assert any("k.yaml:6: workflow[0].spec.mode" in p and "loop.spec.mode" in p for p in problems), problems
    assert any("workflow[0].spec.max_in_flight" in p and "loop.spec.max_in_flight" in p for p in problems)
