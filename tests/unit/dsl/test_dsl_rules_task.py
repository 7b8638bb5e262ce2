"""One case per validation rule (SEMANTICS §2), tasks to YAML: each names its path and replacement."""

from __future__ import annotations

import pytest

from tests.unit.dsl.helpers import HEADER, NOOP_START, check_case, steps, task_with_rules

CASES: list[tuple[str, str, str, list[str]]] = [
    # --- tasks --------------------------------------------------------------------------------
    (
        "duplicate_label",
        steps("- step: start\n  tool:\n    - {name: fetch, kind: noop}\n    - {name: fetch, kind: noop}\n"),
        "workflow[0].tool[1]",
        ["fetch", "workflow[0].tool[0]"],
    ),
    (
        "duplicate_label_across_shapes",
        steps("- step: start\n  tool:\n    - {kind: noop}\n    - task_0: {kind: noop}\n"),
        "workflow[0].tool[1]",
        ["task_0"],
    ),
    (
        "unknown_kind",
        steps("- step: start\n  tool: [{name: t, kind: teleport}]\n"),
        "workflow[0].tool[0].kind",
        ["teleport", "noop", "http"],
    ),
    ("missing_kind", steps("- step: start\n  tool: [{name: t, url: x}]\n"), "workflow[0].tool[0]", ["kind"]),
    ("task_not_mapping", steps("- step: start\n  tool: [noop]\n"), "workflow[0].tool[0]", ["mapping"]),
    ("tool_not_list_or_mapping", steps("- step: start\n  tool: noop\n"), "workflow[0].tool", ["list"]),
    (
        "task_name_not_string",
        steps("- step: start\n  tool: [{name: 5, kind: noop}]\n"),
        "workflow[0].tool[0].name",
        ["string"],
    ),
    (
        "labelled_name_conflict",
        steps("- step: start\n  tool: [{a: {name: b, kind: noop}}]\n"),
        "workflow[0].tool[0].name",
        ["'a'", "'b'"],
    ),
    (
        "task_eval",
        steps("- step: start\n  tool: [{name: t, kind: noop, eval: []}]\n"),
        "workflow[0].tool[0].eval",
        ["spec.policy.rules"],
    ),
    (
        "task_expr",
        steps("- step: start\n  tool: [{name: t, kind: noop, expr: x}]\n"),
        "workflow[0].tool[0].expr",
        ["when", "spec.policy.rules"],
    ),
    (
        "task_when",
        steps("- step: start\n  tool: [{name: t, kind: noop, when: x}]\n"),
        "workflow[0].tool[0].when",
        ["spec.policy.rules"],
    ),
    (
        "task_sink",
        steps("- step: start\n  tool: [{name: t, kind: noop, sink: {}}]\n"),
        "workflow[0].tool[0].sink",
        ["reference"],
    ),
    (
        "label_shadows_ctx",
        steps("- step: start\n  tool: [{name: ctx, kind: noop}]\n"),
        "workflow[0].tool[0]",
        ["'ctx'", "namespace"],
    ),
    (
        "label_shadows_workload_labelled",
        steps("- step: start\n  tool: [{workload: {kind: noop}}]\n"),
        "workflow[0].tool[0]",
        ["'workload'"],
    ),
    (
        "label_underscore",
        steps("- step: start\n  tool: [{name: _mine, kind: noop}]\n"),
        "workflow[0].tool[0]",
        ["'_mine'", "_prev"],
    ),
    (
        "playbook_without_path",
        steps("- step: start\n  tool: [{name: t, kind: playbook}]\n"),
        "workflow[0].tool[0].path",
        ["path"],
    ),
    # --- task policy --------------------------------------------------------------------------
    (
        "policy_without_rules",
        steps("- step: start\n  tool: [{name: t, kind: noop, spec: {policy: {mode: exclusive}}}]\n"),
        "workflow[0].tool[0].spec.policy",
        ["rules"],
    ),
    (
        "policy_unknown_key",
        steps("- step: start\n  tool: [{name: t, kind: noop, spec: {policy: {rules: [], x: 1}}}]\n"),
        "workflow[0].tool[0].spec.policy.x",
        ["rules", "on_unmatched"],
    ),
    (
        "policy_hook_not_empty",
        steps(
            "- step: start\n  tool: [{name: t, kind: noop, spec: {policy: "
            "{rules: [], finally: [{kind: noop}]}}}]\n"
        ),
        "workflow[0].tool[0].spec.policy.finally",
        ["reserved", "empty"],
    ),
    (
        "policy_on_unmatched",
        steps(
            "- step: start\n  tool: [{name: t, kind: noop, spec: {policy: "
            "{rules: [], on_unmatched: stop}}}]\n"
        ),
        "workflow[0].tool[0].spec.policy.on_unmatched",
        ["continue", "fail"],
    ),
    (
        "bad_do",
        task_with_rules("- else: {then: {do: teleport_back}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.do",
        ["teleport_back", "continue, retry, jump, break, fail"],
    ),
    (
        "jump_unknown_label",
        task_with_rules("- else: {then: {do: jump, to: nowhere}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.to",
        ["nowhere", "labels: t"],
    ),
    (
        "jump_without_to",
        task_with_rules('- when: "{{ true }}"\n  then: {do: jump}'),
        "workflow[0].tool[0].spec.policy.rules[0].then",
        ["to"],
    ),
    (
        "to_without_jump",
        task_with_rules("- else: {then: {do: continue, to: t}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.to",
        ["do: jump"],
    ),
    (
        "retry_attempts",
        task_with_rules("- else: {then: {do: retry, attempts: 0}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.attempts",
        ["at least 1"],
    ),
    (
        "retry_backoff",
        task_with_rules("- else: {then: {do: retry, backoff: random}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.backoff",
        ["exponential"],
    ),
    (
        "retry_delay",
        task_with_rules("- else: {then: {do: retry, delay: -1}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.delay",
        ["seconds"],
    ),
    (
        "then_set_vars",
        task_with_rules("- else: {then: {set_vars: {a: 1}}}"),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.set_vars",
        ["set_ctx", "set_iter"],
    ),
    (
        "rule_expr",
        task_with_rules('- expr: "{{ true }}"\n  do: continue'),
        "workflow[0].tool[0].spec.policy.rules[0].expr",
        ["when"],
    ),
    (
        "rule_without_when",
        task_with_rules("- then: {do: continue}"),
        "workflow[0].tool[0].spec.policy.rules[0]",
        ["when", "else"],
    ),
    (
        "rule_without_then",
        task_with_rules('- when: "{{ true }}"'),
        "workflow[0].tool[0].spec.policy.rules[0]",
        ["then"],
    ),
    (
        "else_not_last",
        task_with_rules("- else: {then: {do: continue}}\n- when: x\n  then: {do: fail}"),
        "workflow[0].tool[0].spec.policy.rules[0]",
        ["last"],
    ),
    (
        "set_ctx_parallel",
        task_with_rules(
            "- else: {then: {set_ctx: {a: 1}}}",
            extra_step="  loop: {in: [1], iterator: x, spec: {mode: parallel}}\n",
        ),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.set_ctx",
        ["set_ctx", "parallel"],
    ),
    (
        "set_ctx_parallel_via_loop_policy",
        task_with_rules(
            "- else: {then: {set_ctx: {a: 1}}}",
            extra_step="  loop: {in: [1], iterator: x, spec: {policy: {mode: parallel}}}\n",
        ),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.set_ctx",
        ["set_ctx", "parallel"],
    ),
    # --- templates ----------------------------------------------------------------------------
    (
        "template_in_task_field",
        steps('- step: start\n  tool: [{name: t, kind: noop, result: "{{ workload.x "}]\n'),
        "workflow[0].tool[0].result",
        ["template"],
    ),
    (
        "template_in_labelled_task",
        steps('- step: start\n  tool:\n    - fetch:\n        kind: noop\n        result: "{% if %}"\n'),
        "workflow[0].tool[0].result",
        ["template"],
    ),
    (
        "template_in_arc_when",
        steps('- step: start\n  next: {arcs: [{step: start, when: "{{ event.name == }}"}]}\n'),
        "workflow[0].next.arcs[0].when",
        ["template"],
    ),
    (
        "template_in_workload",
        steps(NOOP_START, root='workload: {a: ["{{ 1 + }}"]}\n'),
        "workload.a[0]",
        ["template"],
    ),
    # --- workbook ---------------------------------------------------------------------------
    (
        "workbook_unknown_kind",
        steps(NOOP_START, root="workbook: {tasks: {w: {kind: warp}}}\n"),
        "workbook.tasks.w.kind",
        ["warp"],
    ),
    ("workbook_unknown_key", steps(NOOP_START, root="workbook: {tools: {}}\n"), "workbook.tools", ["tasks"]),
    (
        "workbook_ref_unknown",
        steps(
            "- step: start\n  tool: [{name: t, kind: workbook, task: nope}]\n",
            root="workbook: {tasks: {w: {kind: noop}}}\n",
        ),
        "workflow[0].tool[0].task",
        ["nope", "w"],
    ),
    (
        "workbook_ref_missing",
        steps("- step: start\n  tool: [{name: t, kind: workbook}]\n"),
        "workflow[0].tool[0].task",
        ["task:"],
    ),
    (
        "workbook_set_ctx_parallel",
        steps(
            "- step: start\n  loop: {in: [1], iterator: x, spec: {mode: parallel}}\n"
            "  tool: [{name: t, kind: workbook, task: w}]\n",
            root="workbook: {tasks: {w: {kind: noop, spec: {policy: "
            "{rules: [{else: {then: {set_ctx: {a: 1}}}}]}}}}}\n",
        ),
        "workflow[0].tool[0]",
        ["set_ctx", "parallel"],
    ),
    (
        "workbook_template_jump_label_missing",
        steps(
            "- step: start\n  tool: [{name: t, kind: workbook, task: w}]\n",
            root="workbook: {tasks: {w: {kind: noop, spec: {policy: "
            "{rules: [{else: {then: {do: jump, to: again}}}]}}}}}\n",
        ),
        "workflow[0].tool[0].task",
        ["'again'", "workbook.tasks.w.spec.policy", "not a task label", "labels: t"],
    ),
    # --- YAML ---------------------------------------------------------------------------------
    (
        "yaml_malformed",
        HEADER + "workflow:\n  - step: start\n    tool: {kind: noop\n",
        "",
        ["line 6", "flow mapping"],
    ),
    (
        "yaml_duplicate_key",
        HEADER + "workflow:\n  - step: start\n    tool: {kind: noop}\n    tool: {kind: noop}\n",
        "",
        ["line 7", "duplicate key 'tool'", "line 6"],
    ),
    ("yaml_not_mapping", "- step: start\n", "", ["mapping"]),
]


@pytest.mark.parametrize(("text", "path", "needles"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_rule(text: str, path: str, needles: list[str]) -> None:
    check_case(text, path, needles)
