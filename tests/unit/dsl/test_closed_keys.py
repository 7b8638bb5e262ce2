"""Every mapping of a playbook has a closed set of keys (issue 27): a misspelt key is an error at
its line with the key meant, a knob of another scope names its scope, and a placeholder the
specifications reserve is refused with the reason."""

from __future__ import annotations

import pytest

from tests.unit.dsl.helpers import find, problems, steps

GATE = "admission: {rules: [{when: '{{ false }}', then: {allow: true}}, {else: {then: {allow: false}}}]}"


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        # the two playbooks of the issue
        (
            steps(f"- step: start\n  spec: {{policy: {{{GATE}}}}}\n  tool: {{kind: noop}}\n"),
            "workflow[0].spec.policy.admission",
            ["did you mean `admit`?"],
        ),
        (
            steps(
                "- step: start\n  spec: {policy: {failure: {mod: best_effort}}}\n"
                "  loop: {in: [1], iterator: x}\n  tool: {kind: noop}\n"
            ),
            "workflow[0].spec.policy.failure.mod",
            ["did you mean `mode`?"],
        ),
        # a step's spec, a loop's spec and policy, a router's spec, the executor's
        (
            steps("- step: start\n  spec: {pol: {}}\n  tool: {kind: noop}\n"),
            "workflow[0].spec.pol",
            ["unknown key 'pol'", "did you mean `pool`?"],
        ),
        (
            steps(
                "- step: start\n  loop: {in: [1], iterator: x, spec: {max_inflight: 2}}\n"
                "  tool: {kind: noop}\n"
            ),
            "workflow[0].loop.spec.max_inflight",
            ["did you mean `max_in_flight`?"],
        ),
        (
            steps(
                "- step: start\n  loop: {in: [1], iterator: x, spec: {policy: {reducer: {n: sum}}}}\n"
                "  tool: {kind: noop}\n"
            ),
            "workflow[0].loop.spec.policy.reducer",
            ["did you mean `reducers`?"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n"
                "  next: {spec: {mdoe: inclusive}, arcs: [{step: start}]}\n"
            ),
            "workflow[0].next.spec.mdoe",
            ["did you mean `mode`?"],
        ),
        (
            steps("- step: start\n  tool: {kind: noop}\n", root="executor: {spec: {timout: 3}}\n"),
            "executor.spec.timout",
            ["did you mean `timeout`?"],
        ),
        (
            steps("- step: start\n  tool: {kind: noop}\n", root="executor: {spec: {policy: {limit: {}}}}\n"),
            "executor.spec.policy.limit",
            ["did you mean `limits`?"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n",
                root="executor: {spec: {policy: {limits: {max_loop_item: 3}}}}\n",
            ),
            "executor.spec.policy.limits.max_loop_item",
            ["did you mean `max_loop_items`?"],
        ),
        (
            steps("- step: start\n  tool: {kind: noop}\n", root="executor: {kind: distributed}\n"),
            "executor.kind",
            ["unknown key 'kind' in `executor`"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n", root="keychain: [{name: k, kind: secret, knd: x}]\n"
            ),
            "keychain[0].knd",
            ["unknown key 'knd' in a keychain entry"],
        ),
        (
            steps("- step: start\n  spec: {policy: {lifecycle: {timeout: 3}}}\n  tool: {kind: noop}\n"),
            "workflow[0].spec.policy.lifecycle.timeout",
            ["did you mean `timeout_s`?"],
        ),
        # a knob in the wrong scope names the right one
        (
            steps("- step: start\n  spec: {policy: {limits: {max_loop_items: 10}}}\n  tool: {kind: noop}\n"),
            "workflow[0].spec.policy.limits.max_loop_items",
            ["bounds a whole execution", "executor.spec.policy.limits.max_loop_items"],
        ),
        (
            steps(
                "- step: start\n  loop: {in: [1], iterator: x,\n"
                "          spec: {policy: {limits: {max_step_runs: 9}}}}\n"
                "  tool: {kind: noop}\n"
            ),
            "workflow[0].loop.spec.policy.limits.max_step_runs",
            ["executor.spec.policy.limits.max_step_runs"],
        ),
        (
            steps("- step: start\n  spec: {policy: {timeouts: {step_s: 3}}}\n  tool: {kind: noop}\n"),
            "workflow[0].spec.policy.timeouts",
            ["executor.spec.policy.defaults.timeouts"],
        ),
        # placeholders: implemented, or refused with the reason
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n",
                root="executor: {spec: {policy: {results: {reference_first: false}}}}\n",
            ),
            "executor.spec.policy.results.reference_first",
            ["always travels by reference", "max_payload_bytes"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n  next: {spec: {policy: {}}, arcs: [{step: start}]}\n"
            ),
            "workflow[0].next.spec.policy",
            ["reserved", "next.spec.mode"],
        ),
        (
            steps("- step: start\n  spec: {policy: {tracing: {}}}\n  tool: {kind: noop}\n"),
            "workflow[0].spec.policy.tracing",
            ["reserved", "not implemented"],
        ),
        (
            steps(
                "- step: start\n  loop: {in: [1], iterator: x, spec: {policy: {backpressure: 3}}}\n"
                "  tool: {kind: noop}\n"
            ),
            "workflow[0].loop.spec.policy.backpressure",
            ["reserved", "max_in_flight"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n",
                root="executor: {spec: {policy: {defaults: {resources: {cpu: 2}}}}}\n",
            ),
            "executor.spec.policy.defaults.resources",
            ["reserved", "spec.pool"],
        ),
        (
            steps(
                "- step: start\n  tool: {kind: noop}\n  next: {arcs: [{step: start, spec: {weight: 2}}]}\n"
            ),
            "workflow[0].next.arcs[0].spec.weight",
            ["reserved", "nothing reads it"],
        ),
    ],
)
def test_an_unknown_or_misplaced_key_is_an_error_at_its_line(text: str, path: str, words: list[str]) -> None:
    p = find(problems(text), path)
    assert p.line > 0
    for w in words:
        assert w in p.message, p.message


def test_what_the_closed_sets_allow_passes() -> None:
    text = steps(
        "- step: start\n"
        "  spec: {pool: default, timeout: 3, max_task_runs: 5, database: x.db,\n"
        "         policy: {failure: {mode: best_effort}, limits: {max_payload_bytes: 10},\n"
        "                  lifecycle: {timeout_s: 3}}}\n"
        "  loop: {in: [1], iterator: x, spec: {mode: parallel, max_in_flight: 2, timeout: 2,\n"
        "         policy: {exec: local, limits: {max_payload_bytes: 9}}}}\n"
        "  tool: {kind: noop}\n"
        "  next: {spec: {mode: inclusive}, arcs: [{step: start, when: false, spec: {}}]}\n",
        root="executor: {spec: {timeout: 3, policy: {limits: {max_loop_items: 3, max_step_runs: 4,\n"
        "  max_event_bytes: 100, max_payload_bytes: 5}, defaults: {timeouts: {step_s: 3}},\n"
        "  results: {reference_first: true}}}}\n",
    )
    assert problems(text) == []


@pytest.mark.parametrize(
    ("tool", "path", "words"),
    [
        (
            "{kind: postgres, auth: pg_mian, command: 'select 1'}",
            "workflow[0].tool[0].auth",
            ["did you mean `pg_main`?"],
        ),
        ("{kind: noop, result: '{{ keychain.tokn.value }}'}", "workflow[0].tool[0].result", ["'tokn'"]),
        ("{kind: noop, result: \"{{ keychain['other'] }}\"}", "workflow[0].tool[0].result", ["'other'"]),
        ("{kind: secrets, key: nope}", "workflow[0].tool[0].key", ["'nope'"]),
    ],
)
def test_a_keychain_name_no_entry_declares_is_an_error(tool: str, path: str, words: list[str]) -> None:
    text = steps(
        f"- step: start\n  tool: [{tool}]\n",
        root="keychain: [{name: pg_main, kind: postgres_credential}, {name: token, kind: secret}]\n",
    )
    p = find(problems(text), path)
    assert "does not declare" in p.message and "keychain" in p.message
    for w in words:
        assert w in p.message, p.message


def test_declared_keychain_names_and_templated_auth_pass() -> None:
    text = steps(
        "- step: start\n  tool:\n"
        "    - {kind: postgres, auth: pg_main, command: 'select 1'}\n"
        "    - {kind: http, url: 'http://x', auth: '{{ workload.which }}'}\n"
        "    - {kind: noop, result: '{{ keychain.token.value }}'}\n",
        root="keychain: [{name: pg_main, kind: postgres_credential}, {name: token, kind: secret}]\n",
    )
    assert problems(text) == []


# ---- smaller rules (issue 27) ------------------------------------------------------------------


def test_iterator_parent_is_refused_since_it_hides_iter_parent() -> None:
    p = find(
        problems(steps("- step: start\n  loop: {in: [1], iterator: parent}\n  tool: {kind: noop}\n")),
        "workflow[0].loop.iterator",
    )
    assert "`parent`" in p.message and "iter.parent" in p.message


def test_set_iter_outside_a_loop_is_an_error() -> None:
    rule = "spec: {policy: {rules: [{else: {then: {set_iter: {page: 1}}}}]}}"
    p = find(
        problems(steps(f"- step: start\n  tool: [{{name: t, kind: noop, {rule}}}]\n")),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.set_iter",
    )
    assert "without `loop`" in p.message
    in_loop = steps(
        f"- step: start\n  loop: {{in: [1], iterator: x}}\n  tool: [{{name: t, kind: noop, {rule}}}]\n"
    )
    assert problems(in_loop) == []


def test_set_iter_of_a_workbook_template_outside_a_loop_is_an_error() -> None:
    text = steps(
        "- step: start\n  tool: [{name: t, kind: workbook, task: w}]\n",
        root="workbook: {tasks: {w: {kind: noop,\n"
        "  spec: {policy: {rules: [{else: {then: {set_iter: {a: 1}}}}]}}}}}\n",
    )
    p = find(problems(text), "workflow[0].tool[0]")
    assert "set_iter" in p.message and "no `loop`" in p.message


def test_the_set_shared_message_points_at_reducers() -> None:
    rule = "spec: {policy: {rules: [{else: {then: {set_shared: {a: 1}}}}]}}"
    p = find(
        problems(steps(f"- step: start\n  tool: [{{name: t, kind: noop, {rule}}}]\n")),
        "workflow[0].tool[0].spec.policy.rules[0].else.then.set_shared",
    )
    assert "reducers" in p.message and "until reducers exist" not in p.message
