"""The policy evaluators (SEMANTICS §6-§8): admission, task rules with backoff and patches,
arcs; built from model objects directly."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from noetl.dsl.errors import TemplateError
from noetl.dsl.model import Arc, Next, Policy, Rule
from noetl.dsl.policy import (
    Directive,
    FiredArc,
    admit,
    apply_patch,
    backoff_delay,
    evaluate_arcs,
    evaluate_task_policy,
    truthy,
)
from noetl.dsl.templates import TemplateEngine

ENGINE = TemplateEngine()
RULES_PATH = "workflow[0].tool[0].spec.policy"


def rule(when: str | None, **then: Any) -> Rule:
    return Rule(when=when, then=then)


def policy(*rules: Rule, on_unmatched: str = "continue") -> Policy:
    return Policy(rules=tuple(rules), on_unmatched=on_unmatched, path=RULES_PATH)  # type: ignore[arg-type]


def ok(result: Any = None) -> dict[str, Any]:
    return {"status": "ok", "result": result}


def err(kind: str = "http_error", **extra: Any) -> dict[str, Any]:
    return {"status": "error", "error": {"kind": kind, "message": "x", "retryable": True}, **extra}


def decide(pol: Policy | None, outcome: dict[str, Any], retry_number: int = 1, **ctx: Any) -> Directive:
    context = {"outcome": outcome, "ctx": {}, "iter": {}, "_prev": None, "_task": "t", "_attempt": 1, **ctx}
    return evaluate_task_policy(pol, outcome, context, ENGINE, retry_number=retry_number)


# --- admission -------------------------------------------------------------------------------


def test_admit_without_policy_or_verdict_allows() -> None:
    assert admit(None, {}, ENGINE) is True
    assert admit(policy(rule("{{ false }}", allow=False)), {}, ENGINE) is True


def test_admit_first_truthy_rule_wins() -> None:
    pol = policy(rule("{{ ctx.a }}", allow=False), rule("{{ ctx.b }}", allow=True), rule(None, allow=False))
    assert admit(pol, {"ctx": {"a": 1, "b": 1}}, ENGINE) is False
    assert admit(pol, {"ctx": {"a": 0, "b": 1}}, ENGINE) is True
    assert admit(pol, {"ctx": {"a": 0, "b": 0}}, ENGINE) is False


def test_admit_join_from_the_conformance_case() -> None:
    pol = policy(
        rule("{{ ctx.a_done | default(false) and ctx.b_done | default(false) }}", allow=True),
        rule(None, allow=False),
    )
    assert admit(pol, {"ctx": {"a_done": True}}, ENGINE) is False
    assert admit(pol, {"ctx": {"a_done": True, "b_done": True}}, ENGINE) is True


def test_admit_then_without_allow_means_allow_and_allow_may_be_a_template() -> None:
    assert admit(policy(rule("{{ true }}")), {}, ENGINE) is True
    assert admit(policy(rule("{{ true }}", allow="{{ ctx.ok }}")), {"ctx": {"ok": 0}}, ENGINE) is False


def test_admit_else_is_the_fallback_wherever_it_is_written() -> None:
    pol = policy(rule(None, allow=False), rule("{{ ctx.go }}", allow=True))
    assert admit(pol, {"ctx": {"go": True}}, ENGINE) is True
    assert admit(pol, {"ctx": {"go": False}}, ENGINE) is False


def test_admit_template_error_names_the_rule() -> None:
    pol = Policy(
        rules=(
            Rule(
                when="{{ ctx.x.y + 1 }}", then={"allow": True}, path="workflow[3].spec.policy.admit.rules[0]"
            ),
        )
    )
    with pytest.raises(TemplateError) as info:
        admit(pol, {"ctx": {}}, ENGINE)
    assert info.value.message.endswith("in workflow[3].spec.policy.admit.rules[0].when")


# --- task policy: defaults and do ------------------------------------------------------------


def test_no_policy_continues_on_ok_and_fails_on_error() -> None:
    assert decide(None, ok(1)) == Directive(do="continue")
    assert decide(None, err()).do == "fail"


def test_no_match_without_else_follows_on_unmatched() -> None:
    never = rule("{{ outcome.status == 'never' }}", do="fail")
    assert decide(policy(never), err()) == Directive(do="continue", matched=False)
    assert decide(policy(never, on_unmatched="fail"), ok()).do == "fail"


def test_first_match_wins_and_reports_which_rule() -> None:
    pol = policy(
        rule("{{ outcome.status == 'error' }}", do="fail"),
        rule("{{ outcome.result > 1 }}", do="break"),
        rule(None, do="continue"),
    )
    assert decide(pol, err()).do == "fail"
    d = decide(pol, ok(5))
    assert (d.do, d.matched, d.rule_index) == ("break", True, 1)
    d = decide(pol, ok(0))
    assert (d.do, d.rule_index) == ("continue", 2)


@pytest.mark.parametrize("do", ["continue", "break", "fail"])
def test_simple_directives(do: str) -> None:
    d = decide(policy(rule(None, do=do)), ok())
    assert (d.do, d.to, d.delay_seconds) == (do, None, 0.0)


def test_then_without_do_continues() -> None:
    assert decide(policy(rule(None, set_ctx={"a": 1})), ok()).do == "continue"


def test_jump_carries_its_target() -> None:
    pol = policy(
        rule(
            "{{ outcome.status == 'error' and outcome.py.exception_type == 'ValueError' }}",
            do="jump",
            to="fallback",
        ),
        rule(None, do="break"),
    )
    d = decide(pol, err("python_error", py={"exception_type": "ValueError"}))
    assert (d.do, d.to) == ("jump", "fallback")


def test_policy_on_outcome_fields_from_the_conformance_cases() -> None:
    pol = policy(
        rule(
            "{{ outcome.status == 'error' and outcome.http.status in [429, 500, 502, 503, 504] }}",
            do="retry",
            attempts=5,
            backoff="exponential",
            delay=0.01,
        ),
        rule("{{ outcome.status == 'error' }}", do="fail"),
        rule(
            None,
            do="continue",
            set_ctx={"attempt": "{{ _attempt }}", "call": "{{ outcome.result.data.call }}"},
        ),
    )
    assert decide(pol, err(http={"status": 503})).do == "retry"
    assert decide(pol, err(http={"status": 404})).do == "fail"
    d = decide(pol, ok({"data": {"call": 3}}), _attempt=3)
    assert d.set_ctx == {"attempt": 3, "call": 3}


# --- retry -----------------------------------------------------------------------------------


def test_retry_defaults() -> None:
    d = decide(policy(rule(None, do="retry")), err())
    assert (d.do, d.attempts, d.delay_seconds) == ("retry", 3, 1.0)


@pytest.mark.parametrize(
    ("backoff", "k", "expected"),
    [
        ("none", 1, 2.0),
        ("none", 4, 2.0),
        ("fixed", 3, 2.0),
        ("linear", 1, 2.0),
        ("linear", 3, 6.0),
        ("exponential", 1, 2.0),
        ("exponential", 2, 4.0),
        ("exponential", 4, 16.0),
    ],
)
def test_backoff_kinds(backoff: str, k: int, expected: float) -> None:
    d = decide(policy(rule(None, do="retry", attempts=10, backoff=backoff, delay=2)), err(), retry_number=k)
    assert d.delay_seconds == expected
    assert d.attempts == 10


def test_max_delay_caps_the_backoff() -> None:
    pol = policy(rule(None, do="retry", backoff="exponential", delay=1, max_delay=5))
    assert [decide(pol, err(), retry_number=k).delay_seconds for k in (1, 2, 3, 4, 5)] == [1, 2, 4, 5, 5]


def test_exponential_backoff_does_not_overflow() -> None:
    assert backoff_delay("exponential", 1.0, 5000, max_delay=30.0) == 30.0
    assert backoff_delay("exponential", 0.0, 5000) == 0.0
    assert backoff_delay("linear", 1.0, 0) == 1.0  # retry numbers start at 1
    with pytest.raises(ValueError):
        backoff_delay("random", 1.0, 1)


def test_delay_may_be_a_template_read_from_the_outcome() -> None:
    pol = policy(rule(None, do="retry", delay="{{ outcome.http.headers['retry-after'] | default(2) }}"))
    assert decide(pol, err(http={"headers": {"retry-after": "7"}})).delay_seconds == 7.0
    assert decide(pol, err(http={"headers": {}})).delay_seconds == 2.0


def test_attempts_and_max_delay_may_be_templates() -> None:
    pol = policy(
        rule(None, do="retry", attempts="{{ workload.tries }}", delay=10, max_delay="{{ workload.cap }}")
    )
    d = decide(pol, err(), workload={"tries": 7, "cap": 3})
    assert (d.attempts, d.delay_seconds) == (7, 3.0)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("delay", "soon"),
        ("delay", "{{ none }}"),
        ("attempts", 0),
        ("attempts", "{{ 'x' }}"),
        ("max_delay", [1]),
    ],
)
def test_bad_retry_numbers_are_template_errors_naming_the_field(field: str, value: Any) -> None:
    pol = Policy(rules=(Rule(when=None, then={"do": "retry", field: value}, path=f"{RULES_PATH}.rules[0]"),))
    with pytest.raises(TemplateError) as info:
        decide(pol, err())
    assert info.value.message.endswith(f"{RULES_PATH}.rules[0].then.{field}")


def test_delay_is_not_evaluated_unless_retrying() -> None:
    pol = policy(rule(None, do="continue", delay="{{ missing.value }}"))
    assert decide(pol, ok()).delay_seconds == 0.0


# --- set_ctx / set_iter ----------------------------------------------------------------------


def test_patches_are_rendered_against_the_context_before_any_patch() -> None:
    pol = policy(
        rule(
            None,
            do="jump",
            to="fetch",
            set_ctx={"n": "{{ ctx.n + 1 }}", "old_n": "{{ ctx.n }}", "page": "{{ iter.page }}"},
            set_iter={
                "page": "{{ (iter.page | int) + 1 }}",
                "seen_n": "{{ ctx.n }}",
                "pages": "{{ (iter.pages | default(1)) + 1 }}",
            },
        )
    )
    d = decide(pol, ok(), ctx={"n": 1}, iter={"page": 4})
    assert d.set_ctx == {"n": 2, "old_n": 1, "page": 4}
    assert d.set_iter == {"page": 5, "seen_n": 1, "pages": 2}
    assert d.do == "jump" and d.to == "fetch"


def test_patch_keys_are_not_rendered_and_values_keep_native_types() -> None:
    d = decide(policy(rule(None, set_ctx={"{{ x }}": "{{ [1, 2] }}", "a.b": "{{ {'k': 1} }}"})), ok())
    assert d.set_ctx == {"{{ x }}": [1, 2], "a.b": {"k": 1}}


def test_patch_template_error_names_its_path() -> None:
    pol = Policy(
        rules=(
            Rule(
                when=None,
                then={"set_ctx": {"x": "{{ iter.pge }}"}},
                path="workflow[1].tool[2].spec.policy.rules[0]",
            ),
        )
    )
    with pytest.raises(TemplateError) as info:
        decide(pol, ok())
    assert info.value.message == (
        "'iter.pge' is undefined (iter is empty) in workflow[1].tool[2].spec.policy.rules[0].then.set_ctx.x"
    )


def test_patch_that_renders_to_a_non_mapping_is_an_error() -> None:
    with pytest.raises(TemplateError):
        decide(policy(rule(None, set_iter="{{ [1] }}")), ok())


def test_when_template_errors_name_the_rule_path() -> None:
    with pytest.raises(TemplateError) as info:
        decide(policy(rule(None), rule("{{ outcome.result.x.y < 1 }}")), ok({}))
    assert info.value.message.endswith(f"in {RULES_PATH}.rules[1].when")


# --- apply_patch -----------------------------------------------------------------------------


def test_apply_patch_replaces_top_level_keys_and_does_not_mutate() -> None:
    target = {"a": {"x": 1}, "b": [1], "keep": True}
    patch = {"a": {"y": 2}, "b": [2], "c": None}
    before_t, before_p = copy.deepcopy(target), copy.deepcopy(patch)
    out = apply_patch(target, patch)
    assert out == {"a": {"y": 2}, "b": [2], "keep": True, "c": None}
    assert target == before_t and patch == before_p and out is not target


def test_apply_patch_dotted_keys_set_nested_paths() -> None:
    target = {"a": {"b": {"c": 1, "d": 2}, "e": 3}, "s": 5}
    out = apply_patch(target, {"a.b.c": 10, "x.y.z": 1, "s.t": 2})
    assert out == {"a": {"b": {"c": 10, "d": 2}, "e": 3}, "x": {"y": {"z": 1}}, "s": {"t": 2}}
    assert target == {"a": {"b": {"c": 1, "d": 2}, "e": 3}, "s": 5}


def test_apply_patch_applies_keys_in_order() -> None:
    patch = {"a": {"k": 1}, "a.j": 2}
    assert apply_patch({}, patch) == {"a": {"k": 1, "j": 2}}
    assert patch == {"a": {"k": 1}, "a.j": 2}
    assert apply_patch({}, {"a.j": 2, "a": {"k": 1}}) == {"a": {"k": 1}}


@given(
    st.dictionaries(st.text(alphabet="abc", max_size=3), st.integers(), max_size=5),
    st.dictionaries(st.text(alphabet="abc", max_size=3), st.integers(), max_size=5),
)
def test_apply_patch_without_dots_is_dict_update(target: dict[str, int], patch: dict[str, int]) -> None:
    assert apply_patch(target, patch) == {**target, **patch}


# --- arcs ------------------------------------------------------------------------------------


def arcs(*items: Arc, mode: str = "exclusive") -> Next:
    return Next(mode=mode, arcs=items, path="workflow[3].next")  # type: ignore[arg-type]


def arc(step: str, when: str | None = None, args: dict[str, Any] | None = None) -> Arc:
    return Arc(step=step, when=when, args=args)


def test_no_next_fires_nothing() -> None:
    assert evaluate_arcs(None, {}, ENGINE) == []


def test_exclusive_fires_the_first_match_only() -> None:
    nxt = arcs(
        arc("first", "{{ workload.mode == 'b' }}"),
        arc("second", "{{ workload.mode == 'b' }}"),
        arc("fallback"),
    )
    assert evaluate_arcs(nxt, {"workload": {"mode": "b"}}, ENGINE) == [FiredArc(0, "first", {})]
    assert evaluate_arcs(nxt, {"workload": {"mode": "z"}}, ENGINE) == [FiredArc(2, "fallback", {})]


def test_inclusive_fires_every_match() -> None:
    nxt = arcs(
        arc("left", "{{ workload.n > 1 }}"),
        arc("right", "{{ workload.n > 2 }}"),
        arc("never", "{{ workload.n > 100 }}"),
        arc("always"),
        mode="inclusive",
    )
    fired = evaluate_arcs(nxt, {"workload": {"n": 5}}, ENGINE)
    assert [(f.index, f.step) for f in fired] == [(0, "left"), (1, "right"), (3, "always")]


def test_nothing_matches() -> None:
    assert evaluate_arcs(arcs(arc("a", "{{ false }}"), arc("b", "{{ 0 }}")), {}, ENGINE) == []


def test_args_are_rendered_natively_and_only_for_arcs_that_fire() -> None:
    nxt = arcs(
        arc("no", "{{ false }}", {"boom": "{{ missing.x }}"}),
        arc("yes", None, {"n": 41, "label": "x-{{ workload.suffix }}", "r": "{{ event.result }}"}),
        arc("later", "{{ missing.y }}", {"boom": "{{ missing.x }}"}),
    )
    fired = evaluate_arcs(nxt, {"workload": {"suffix": "y"}, "event": {"result": [2]}}, ENGINE)
    assert fired == [FiredArc(1, "yes", {"n": 41, "label": "x-y", "r": [2]})]


def test_event_routing_from_the_conformance_cases() -> None:
    exhausted = "{{ event.name == 'step.failed' and event.error.kind == 'retries_exhausted' }}"
    nxt = arcs(arc("cleanup", exhausted), arc("finish", "{{ event.name == 'step.done' }}"))
    failed = {"event": {"name": "step.failed", "status": "error", "error": {"kind": "retries_exhausted"}}}
    done = {"event": {"name": "step.done", "status": "success", "result": 1}}
    assert [f.step for f in evaluate_arcs(nxt, failed, ENGINE)] == ["cleanup"]
    assert [f.step for f in evaluate_arcs(nxt, done, ENGINE)] == ["finish"]


def test_arc_template_errors_name_the_arc_path() -> None:
    nxt = arcs(arc("a", "{{ false }}"), arc("b", "{{ event.error.kind.x + 1 }}"))
    with pytest.raises(TemplateError) as info:
        evaluate_arcs(nxt, {"event": {}}, ENGINE)
    assert info.value.message == (
        "'event.error.kind.x' is undefined (event.error is undefined; "
        "event is empty) in workflow[3].next.arcs[1].when"
    )
    nxt = Next(
        mode="exclusive",
        arcs=(Arc(step="a", when=None, args={"x": "{{ nope }}"}, path="workflow[3].next.arcs[0]"),),
    )
    with pytest.raises(TemplateError) as info:
        evaluate_arcs(nxt, {}, ENGINE)
    assert info.value.message == (
        "'nope' is undefined (nothing is defined here) in workflow[3].next.arcs[0].args.x"
    )


def test_undefined_when_is_an_error_not_false() -> None:
    with pytest.raises(TemplateError):
        evaluate_arcs(arcs(arc("a", "{{ event.nope }}")), {"event": {}}, ENGINE)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (None, False),
        (0, False),
        (1, True),
        ("", False),
        ("false", True),
        ([], False),
        ([0], True),
        ({}, False),
        ({"a": 1}, True),
        (0.0, False),
    ],
)
def test_truthy_is_python_truthiness(value: Any, expected: bool) -> None:
    assert truthy(value) is expected
