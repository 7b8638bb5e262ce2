"""Normalization: the four task shapes, policies by scope, defaults, paths and lines."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from noetl.dsl import load_playbook, load_playbook_file
from noetl.dsl.errors import PlaybookInvalidError
from tests.unit.dsl.helpers import steps

SHAPES = steps("""\
- step: start
  tool:
    - name: fetch
      kind: http
      url: "http://x"
      spec:
        timeout: 3
        policy:
          rules:
            - when: "{{ outcome.status == 'error' }}"
              then: {do: retry, attempts: 2}
            - else:
                then: {do: jump, to: task_2}
    - parse:
        kind: python
        code: "result = 1"
    - kind: noop
  next:
    spec: {mode: inclusive}
    arcs:
      - step: single
        when: "{{ event.name == 'step.done' }}"
        args: {a: 1}
      - step: single
- step: single
  tool:
    kind: noop
    result: 5
""")


def test_the_four_task_shapes_normalize_to_labelled_tasks() -> None:
    pb = load_playbook(SHAPES, "shapes.yaml")
    start, single = pb.workflow
    assert [t.name for t in start.tool] == ["fetch", "parse", "task_2"]
    assert [t.kind for t in start.tool] == ["http", "python", "noop"]
    assert [t.path for t in start.tool] == [
        "workflow[0].tool[0]",
        "workflow[0].tool[1]",
        "workflow[0].tool[2]",
    ]
    (task,) = single.tool
    assert (task.name, task.kind, task.config, task.path) == (
        "single_task",
        "noop",
        {"result": 5},
        "workflow[1].tool[0]",
    )


def test_unnamed_tasks_are_labelled_by_position() -> None:
    pb = load_playbook(steps("- step: start\n  tool:\n    - {name: first, kind: noop}\n    - {kind: noop}\n"))
    assert [t.name for t in pb.workflow[0].tool] == ["first", "task_1"]


def test_task_lines_are_where_the_task_is_written() -> None:
    pb = load_playbook(SHAPES)
    lines = SHAPES.splitlines()
    written = [lines[t.line - 1].strip() for t in pb.workflow[0].tool]
    assert written == ["- name: fetch", "- parse:", "- kind: noop"]
    assert lines[pb.workflow[1].tool[0].line - 1].strip() == "tool:"
    assert lines[pb.workflow[1].line - 1].strip() == "- step: single"


def test_task_config_spec_and_policy_are_split() -> None:
    fetch = load_playbook(SHAPES).workflow[0].tool[0]
    assert fetch.config == {"url": "http://x"}
    assert fetch.spec == {"timeout": 3}
    assert fetch.policy is not None
    assert fetch.policy.path == "workflow[0].tool[0].spec.policy"
    assert fetch.policy.on_unmatched == "continue"
    first, fallback = fetch.policy.rules
    assert first.when == "{{ outcome.status == 'error' }}"
    assert first.then == {"do": "retry", "attempts": 2}
    assert first.path == "workflow[0].tool[0].spec.policy.rules[0]"
    assert fallback.is_else and fallback.then == {"do": "jump", "to": "task_2"}


@pytest.mark.parametrize("rule", ["- else: {then: {do: fail}}", "- else: null\n  then: {do: fail}"])
def test_both_else_spellings_give_the_fallback_rule(rule: str) -> None:
    rules = "\n".join("              " + line for line in rule.splitlines())
    text = steps(
        f"- step: start\n  tool:\n    - name: t\n      kind: noop\n      spec:\n        policy:\n"
        f"          on_unmatched: fail\n          rules:\n{rules}\n"
    )
    policy = load_playbook(text).workflow[0].tool[0].policy
    assert policy is not None and policy.on_unmatched == "fail"
    (only,) = policy.rules
    assert only.when is None and only.then == {"do": "fail"}


def test_then_without_do_means_continue_and_boolean_when_becomes_a_template() -> None:
    text = steps(
        "- step: start\n  tool:\n    - name: t\n      kind: noop\n      spec: {policy: {rules: "
        "[{when: true, then: {set_ctx: {a: 1}}}]}}\n"
    )
    (rule,) = load_playbook(text).workflow[0].tool[0].policy.rules
    assert rule.when == "{{ true }}"
    assert rule.then == {"set_ctx": {"a": 1}, "do": "continue"}


def test_next_router_defaults_and_arcs() -> None:
    pb = load_playbook(SHAPES)
    nxt = pb.workflow[0].next
    assert nxt is not None and nxt.mode == "inclusive" and nxt.path == "workflow[0].next"
    a, b = nxt.arcs
    assert (a.step, a.when, a.args, a.path) == (
        "single",
        "{{ event.name == 'step.done' }}",
        {"a": 1},
        "workflow[0].next.arcs[0]",
    )
    assert (b.when, b.args) == (None, None)
    plain = load_playbook(
        steps("- step: start\n  next: {arcs: [{step: b}]}\n- step: b\n  tool: {kind: noop}\n")
    )
    assert plain.workflow[0].next.mode == "exclusive"
    assert plain.workflow[0].tool == ()


def test_step_scope_policies_admit_and_failure_mode() -> None:
    text = steps("""\
        - step: start
          spec:
            timeout: 9
            policy:
              failure: {mode: best_effort}
              admit:
                rules:
                  - when: "{{ ctx.ok }}"
                    then: {allow: true}
                  - else: {then: {allow: false}}
          tool: {kind: noop}
        """)
    step = load_playbook(text).workflow[0]
    assert step.spec == {"timeout": 9}
    assert step.failure_mode == "best_effort"
    assert step.admit is not None and step.admit.path == "workflow[0].spec.policy.admit"
    assert [(r.when, r.then) for r in step.admit.rules] == [
        ("{{ ctx.ok }}", {"allow": True}),
        (None, {"allow": False}),
    ]
    assert (
        load_playbook(steps("- step: start\n  tool: {kind: noop}\n")).workflow[0].failure_mode == "fail_fast"
    )


@pytest.mark.parametrize(
    ("loop", "mode", "cap", "spec"),
    [
        ("{in: '{{ workload.xs }}', iterator: x}", "sequential", 16, {}),
        (
            "{in: [1, 2], iterator: x, spec: {mode: parallel, max_in_flight: 3, timeout: 2}}",
            "parallel",
            3,
            {"timeout": 2},
        ),
        (
            "{in: [1], iterator: x, spec: {policy: {mode: parallel, max_in_flight: 4, exec: local}}}",
            "parallel",
            4,
            {},
        ),
    ],
)
def test_loop_modes_from_spec_or_spec_policy(loop: str, mode: str, cap: int, spec: dict[str, object]) -> None:
    step = load_playbook(steps(f"- step: start\n  loop: {loop}\n  tool: {{kind: noop}}\n")).workflow[0]
    assert step.loop is not None
    assert (step.loop.mode, step.loop.max_in_flight, step.loop.spec, step.loop.path) == (
        mode,
        cap,
        spec,
        "workflow[0].loop",
    )
    assert step.loop.iterator == "x"


def test_playbook_fields_source_digest_and_file() -> None:
    text = steps(
        "- step: start\n  tool: {kind: noop}\n",
        root="keychain: [{name: pg, kind: postgres_credential}]\nworkload: {a: 1}\n"
        "executor: {spec: {timeout: 1}}\nworkbook: {tasks: {w: {kind: noop}}}\n",
    )
    pb = load_playbook(text, "p.yaml")
    assert pb.source == text and pb.file == "p.yaml"
    assert pb.digest == hashlib.sha256(text.encode()).hexdigest()
    assert pb.metadata.name == "t"
    assert pb.keychain[0].name == "pg" and pb.keychain[0].extra == {}
    assert pb.workload == {"a": 1} and pb.executor == {"spec": {"timeout": 1}}
    assert pb.workbook == {"w": {"kind": "noop"}}
    assert pb.step("start").name == "start"


def test_metadata_version_is_a_string() -> None:
    text = (
        "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t, version: 2}\n"
        "workflow: [{step: start, tool: {kind: noop}}]\n"
    )
    assert load_playbook(text).metadata.version == "2"


def test_load_playbook_raises_with_every_problem() -> None:
    with pytest.raises(PlaybookInvalidError) as info:
        load_playbook(steps("- step: begin\n  tool: [{kind: warp}]\n"), "bad.yaml")
    assert {p.path for p in info.value.problems} == {"workflow", "workflow[0].tool[0].kind"}
    assert info.value.kind == "playbook_invalid"


def test_load_playbook_file(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(steps("- step: start\n  tool: {kind: noop}\n"), encoding="utf-8")
    assert load_playbook_file(f).file == str(f)
    with pytest.raises(PlaybookInvalidError) as info:
        load_playbook_file(tmp_path / "missing.yaml")
    assert "not found" in info.value.problems[0].message


WORKBOOK_POLICY = (
    "workbook:\n  tasks:\n    w:\n      kind: noop\n      spec:\n        timeout: 5\n        policy:\n"
    "          on_unmatched: fail\n          rules:\n"
    "            - when: \"{{ outcome.status == 'error' }}\"\n              then: {do: retry, attempts: 2}\n"
)


def test_workbook_task_runs_under_its_templates_policy() -> None:
    text = steps("- step: start\n  tool:\n    - {name: t, kind: workbook, task: w}\n", root=WORKBOOK_POLICY)
    task = load_playbook(text).step("start").tool[0]
    assert task.policy is not None
    assert task.policy.on_unmatched == "fail"
    assert [r.then for r in task.policy.rules] == [{"do": "retry", "attempts": 2}]
    assert task.policy.path == "workbook.tasks.w.spec.policy"
    assert task.policy.rules[0].path == "workbook.tasks.w.spec.policy.rules[0]"


def test_workbook_task_own_rules_win_and_inherit_on_unmatched() -> None:
    own = (
        "- step: start\n  tool:\n    - name: t\n      kind: workbook\n      task: w\n"
        "      spec: {policy: {rules: [{else: {then: {do: break}}}]}}\n"
    )
    task = load_playbook(steps(own, root=WORKBOOK_POLICY)).step("start").tool[0]
    assert task.policy is not None
    assert [r.then for r in task.policy.rules] == [{"do": "break"}]
    assert task.policy.on_unmatched == "fail"  # left out by the task: the template's
    assert task.policy.path == "workflow[0].tool[0].spec.policy"


def test_workbook_template_without_policy_leaves_the_task_without_one() -> None:
    text = steps(
        "- step: start\n  tool:\n    - {name: t, kind: workbook, task: w}\n",
        root="workbook: {tasks: {w: {kind: noop}}}\n",
    )
    assert load_playbook(text).step("start").tool[0].policy is None
