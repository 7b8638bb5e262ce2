"""Each legacy construct, what it becomes, and what is reported."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from noetl.dsl.migrate import migrate_text
from noetl.dsl.migrate.jinja import rewrite
from noetl.dsl.policy import admit, evaluate_arcs, evaluate_task_policy
from noetl.dsl.templates import TemplateEngine
from noetl.dsl.validate import load_playbook

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: m}\n"


def migrate(body: str) -> tuple[dict[str, Any], list[str], str]:
    text = HEAD + textwrap.dedent(body).lstrip("\n")
    result = migrate_text(text, "m.yaml")
    assert result.text is not None and result.problems == [], [str(p) for p in result.problems]
    return yaml.safe_load(result.text), [str(n) for n in result.notes], result.text


def test_case_next_becomes_arcs_and_retry_becomes_a_rule() -> None:
    doc, notes, text = migrate("""
        workflow:
          - step: start
            tool: {kind: http, url: "http://x"}
            case:
              # retry the flaky API
              - when: "{{ event.name == 'call.done' and error.status in [502, 503] }}"
                then:
                  retry: {max_attempts: 4, initial_delay: 0.5, backoff_multiplier: 2}
              - when: "{{ event.name == 'step.exit' and response.data.ok }}"
                then:
                  next: [{step: done, args: {v: "{{ result.data.v }}"}}]
          - step: done
            tool: {kind: noop}
        """)
    start = doc["workflow"][0]
    rules = start["tool"]["spec"]["policy"]["rules"]
    assert rules[0] == {
        "when": "{{ outcome.http.status in [502, 503] }}",
        "then": {"do": "retry", "attempts": 4, "delay": 0.5, "backoff": "exponential"},
    }
    assert [r.get("then", {}).get("do") for r in rules[1:]] == ["fail", None]
    assert start["next"] == {
        "arcs": [
            {
                "step": "done",
                "when": "{{ event.name == 'step.done' and event.result.data.ok }}",
                "args": {"v": "{{ event.result.data.v }}"},
            }
        ]
    }
    assert (
        "          rules:\n            # retry the flaky API\n            - when:" in text
    )  # it followed the rule
    assert any("`case` became" in n for n in notes)


def test_migrated_rules_decide_like_the_draft() -> None:
    _, _, text = migrate("""
        workflow:
          - step: start
            tool: {kind: noop}
            retry:
              - when: "{{ error is defined }}"
                then: {max_attempts: 3}
        """)
    pb = load_playbook(text, "m.yaml")
    policy = pb.workflow[0].tool[0].policy
    eng = TemplateEngine()
    err = {"status": "error", "error": {"kind": "x"}}
    assert evaluate_task_policy(policy, err, {"outcome": err}, eng, retry_number=1).do == "retry"
    ok = {"status": "ok", "result": 1}
    assert evaluate_task_policy(policy, ok, {"outcome": ok}, eng, retry_number=1).do == "continue"


def test_step_when_becomes_admission() -> None:
    _, notes, text = migrate("""
        workflow:
          - step: start
            when: "{{ vars.ready }}"
            tool: {kind: noop}
        """)
    step = load_playbook(text, "m.yaml").workflow[0]
    eng = TemplateEngine()
    assert admit(step.admit, {"ctx": {"ready": True}}, eng) is True
    assert admit(step.admit, {"ctx": {"ready": False}}, eng) is False
    assert any("admission" in n for n in notes)


def test_vars_and_their_reads() -> None:
    doc, _, _ = migrate("""
        workflow:
          - step: start
            tool: {kind: duckdb, query: "select 1 as id"}
            vars: {user_id: "{{ result[0].id }}"}
            next: after
          - step: after
            tool: {kind: noop, result: "{{ vars.user_id }}"}
        """)
    save = doc["workflow"][0]["tool"][1]
    assert save["name"] == "save_vars"
    assert save["spec"]["policy"]["rules"][0]["else"]["then"]["set_ctx"] == {
        "user_id": "{{ outcome.result.rows[0].id }}"
    }
    assert doc["workflow"][1]["tool"]["result"] == "{{ ctx.user_id }}"


def test_root_vars_become_workload() -> None:
    doc, _, _ = migrate("""
        vars: {region: eu}
        workflow:
          - step: start
            tool: {kind: noop, result: "{{ vars.region }}"}
        """)
    assert (
        doc["workload"] == {"region": "eu"}
        and doc["workflow"][0]["tool"]["result"] == "{{ workload.region }}"
    )


def test_next_lists_002_exclusive_and_004_fanout() -> None:
    doc, _, _ = migrate("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: [a, b]
          - step: a
            tool: {kind: noop}
            spec: {next_mode: exclusive}
            next:
              - {step: b, when: "{{ event.status == 'success' }}"}
              - step: c
          - step: b
            tool: {kind: noop}
          - step: c
            tool: {kind: noop}
        """)
    assert doc["workflow"][0]["next"] == {
        "spec": {"mode": "inclusive"},
        "arcs": [{"step": "a"}, {"step": "b"}],
    }
    assert doc["workflow"][1]["next"]["arcs"][0]["when"] == "{{ event.status == 'success' }}"
    assert "spec" not in doc["workflow"][1]["next"] and "spec" not in doc["workflow"][1]


def test_case_fanout_with_structural_fallback_is_guarded() -> None:
    _, _, text = migrate("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: fallback
            case:
              - when: "{{ event.name == 'step.exit' and workload.x }}"
                then:
                  next: [a, b]
          - {step: a, tool: {kind: noop}}
          - {step: b, tool: {kind: noop}}
          - {step: fallback, tool: {kind: noop}}
        """)
    step = load_playbook(text, "m.yaml").workflow[0]
    eng = TemplateEngine()
    done = {"event": {"name": "step.done"}}
    assert [f.step for f in evaluate_arcs(step.next, {**done, "workload": {"x": True}}, eng)] == ["a", "b"]
    assert [f.step for f in evaluate_arcs(step.next, {**done, "workload": {"x": False}}, eng)] == ["fallback"]


def test_eval_expr_and_task_when() -> None:
    doc, _, text = migrate("""
        workflow:
          - step: start
            tool:
              - fetch:
                  kind: noop
                  eval:
                    - expr: "{{ outcome.result }}"
                      do: continue
                      set_vars: {seen: true}
                    - else: {do: break, set_prev: 1}
              - maybe:
                  kind: noop
                  when: "{{ workload.on }}"
              - last: {kind: noop}
        """)
    tool = doc["workflow"][0]["tool"]
    assert tool[0]["fetch"]["spec"]["policy"]["rules"] == [
        {"when": "{{ outcome.result }}", "then": {"do": "continue", "set_ctx": {"seen": True}}},
        {"else": {"then": {"do": "break"}}},
    ]
    assert tool[1]["name"] == "maybe_gate" and list(tool[2]) == ["maybe"]
    gate = load_playbook(text, "m.yaml").workflow[0].tool[1].policy
    skip = evaluate_task_policy(
        gate, {"status": "ok"}, {"workload": {"on": False}}, TemplateEngine(), retry_number=1
    )
    assert (skip.do, skip.to) == ("jump", "last")
    notes = migrate_text(HEAD + text.split("kind: Playbook\n", 1)[1], "m").notes
    assert notes == []


def test_sink_and_end_and_loop_mode() -> None:
    doc, notes, _ = migrate("""
        workflow:
          - step: start
            loop: {in: [1, 2], iterator: n, mode: sequential}
            tool: {kind: python, code: "def main(n): return n", args: {n: "{{ n }}"}}
            sink:
              tool: {kind: duckdb, query: "select 1"}
              args: {row: "{{ result }}"}
            next: end
        """)
    step = doc["workflow"][0]
    assert step["loop"] == {"in": [1, 2], "iterator": "n", "spec": {"mode": "sequential"}}
    assert step["tool"][0]["args"] == {"n": "{{ iter.n }}"}
    assert step["tool"][1] == {
        "name": "sink",
        "kind": "duckdb",
        "query": "select 1",
        "params": {"row": "{{ _prev }}"},  # a duckdb statement reads a mapping as `$row`
    }
    assert "next" not in step and any("`end`" in n for n in notes)


def test_untranslated_actions_are_reported_with_lines() -> None:
    result = migrate_text(
        HEAD
        + textwrap.dedent("""
        workflow:
          - step: start
            tool: {kind: noop}
            case:
              - when: "{{ event.name == 'call.done' }}"
                then:
                  collect: {from: response.data, into: pages}
        """).lstrip("\n"),
        "m.yaml",
    )
    (note,) = result.untranslated
    assert note.line == 10 and note.path == "workflow[0].case[0].then.collect" and "collect" in note.message
    assert "not translated" in str(note)


def test_unreadable_input() -> None:
    assert migrate_text("a: [", "m.yaml").text is None
    assert migrate_text("42", "m.yaml").text is None


def test_rewrite_names_only_in_name_position() -> None:
    renames = {"vars": "ctx", "error": "outcome.error", "_retry.index": "_attempt"}
    assert rewrite("{{ vars.a ~ 'vars' ~ x.vars }} vars", renames) == "{{ ctx.a ~ 'vars' ~ x.vars }} vars"
    assert (
        rewrite("{{ x | default(error) is defined }}", renames)
        == "{{ x | default(outcome.error) is defined }}"
    )
    assert rewrite("{{ _retry.index + f(error=1) }}", renames) == "{{ _attempt + f(error=1) }}"
    events = {"call.error": "outcome.status == 'error'", "call.done": "true"}.get
    assert rewrite("{{ event.name != 'call.error' }}", {}, events) == "{{ outcome.status != 'error' }}"
    assert rewrite("{{ event.name == 'call.done' and y }}", {}, events) == "{{ y }}"
