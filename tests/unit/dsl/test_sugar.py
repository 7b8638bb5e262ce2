"""Authoring sugar (SEMANTICS §21): choose/while/until compile to canonical tasks before validation,
with stable labels, one merge point per construct, lines at the sugar, and a debug map."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.cli.main import main
from noetl.dsl import load_playbook, validate_text
from noetl.dsl.migrate import migrate_text
from noetl.dsl.sugar import compile_text, is_sugar, render

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "docs" / "examples" / "sugar.yaml"


def _doc(tool: str) -> str:
    head = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"
    head += "workflow:\n  - step: start\n    tool:\n"
    return head + textwrap.indent(textwrap.dedent(tool), "      ")


CHOOSE = _doc(
    """\
    - name: route
      choose:
        - when: "{{ _prev == 1 }}"
          do: [{name: one, kind: noop, result: 1}]
        - when: "{{ _prev == 2 }}"
          do:
            - two: {kind: noop, result: 2}
        - else:
            do: []
    - name: after
      kind: noop
    """
)


def _tasks(text: str) -> list[dict[str, Any]]:
    c = compile_text(text, "t.yaml")
    assert c.problems == []
    return c.data["workflow"][0]["tool"]


def _rules(task: dict[str, Any]) -> list[tuple[str | None, str]]:
    out = []
    for rule in task.get("spec", {}).get("policy", {}).get("rules", []):
        then = rule["else"]["then"] if "else" in rule else rule["then"]
        out.append((rule.get("when"), then["to"]))
    return out


def test_choose_compiles_to_a_dispatch_branches_exits_and_one_merge_point() -> None:
    tasks = _tasks(CHOOSE)
    assert [t["name"] for t in tasks] == [
        "route",
        "route.0",
        "one",
        "route.0.exit",
        "route.1",
        "two",
        "route.1.exit",
        "route.2",
        "route.end",
        "after",
    ]
    assert _rules(tasks[0]) == [
        ("{{ _prev == 1 }}", "route.0"),
        ("{{ _prev == 2 }}", "route.1"),
        (None, "route.2"),
    ]
    # no branch falls through into the next one: each ends with a jump to the merge point
    assert _rules(tasks[3]) == [(None, "route.end")] and _rules(tasks[6]) == [(None, "route.end")]
    # generated tasks are noops without `result`: they pass `_prev` on unchanged
    assert all(
        t["kind"] == "noop" and "result" not in t for t in tasks if "." in t["name"] or t["name"] == "route"
    )
    assert tasks[5] == {"name": "two", "kind": "noop", "result": 2}  # the labelled form made canonical


def test_choose_without_else_goes_to_the_merge_point() -> None:
    tasks = _tasks(
        _doc('- name: c\n  choose:\n    - when: "{{ true }}"\n      do: [{name: a, kind: noop}]\n')
    )
    assert [t["name"] for t in tasks] == ["c", "c.0", "a", "c.end"]
    assert _rules(tasks[0]) == [("{{ true }}", "c.0"), (None, "c.end")]


def test_while_tests_before_and_until_after_each_round() -> None:
    tasks = _tasks(
        _doc(
            """\
            - name: w
              while: "{{ iter.more }}"
              do: [{name: body, kind: noop}]
            - name: u
              until: "{{ _prev }}"
              do: [{name: poll, kind: noop}]
            """
        )
    )
    assert [t["name"] for t in tasks] == ["w", "body", "w.repeat", "w.end", "u", "poll", "u.test", "u.end"]
    assert _rules(tasks[0]) == [("{{ iter.more }}", "body"), (None, "w.end")]
    assert _rules(tasks[2]) == [(None, "w")]
    assert _rules(tasks[6]) == [("{{ _prev }}", "u.end"), (None, "poll")]
    assert "spec" not in tasks[-1]  # the last merge point simply ends the pipeline


def test_labels_are_stable_and_the_model_runs_only_canonical_tasks() -> None:
    a, b = compile_text(CHOOSE, "t.yaml"), compile_text(CHOOSE, "t.yaml")
    assert a.data == b.data
    pb = load_playbook(CHOOSE, "t.yaml")
    assert [t.kind for t in pb.workflow[0].tool].count("noop") == len(pb.workflow[0].tool)
    assert pb.workflow[0].tool[2].line == 10  # the moved task keeps its own line


def test_a_playbook_without_sugar_is_left_alone() -> None:
    text = _doc("- {name: a, kind: noop}\n")
    c = compile_text(text, "t.yaml")
    assert (
        c.debug == [] and c.origins == {} and c.data["workflow"][0]["tool"] == [{"name": "a", "kind": "noop"}]
    )


def test_is_sugar_reads_both_list_forms() -> None:
    assert is_sugar({"name": "x", "while": True, "do": []})
    assert is_sugar({"x": {"until": True, "do": []}})
    assert not is_sugar({"name": "x", "kind": "noop", "while": True})  # a task: `while` is its unknown field


def test_debug_map_names_the_sugar_of_every_generated_task() -> None:
    c = compile_text(CHOOSE, "t.yaml")
    entries = {d.label: d for d in c.debug}
    assert set(entries) == {
        "route",
        "route.0",
        "route.0.exit",
        "route.1",
        "route.1.exit",
        "route.2",
        "route.end",
    }
    assert entries["route"].role == "dispatch" and entries["route"].line == 7
    assert entries["route.1"].source == "workflow[0].tool[0].choose[1]" and entries["route.1"].line == 11
    text = render(c, "t.yaml")
    assert "route.1 (branch) <- t.yaml:11 workflow[0].tool[0].choose[1] (choose)" in text
    assert validate_text(text.split("# debug map")[0], "compiled.yaml") == []


BAD = _doc(
    """\
    - name: route
      choose:
        - when: "{{ true }}"
          do:
            - name: x
              kind: noop
              sql: nope
        - else:
            do:
              - name: y
                kind: noop
                spec: {policy: {rules: [{else: {then: {do: jump, to: nowhere}}}]}}
    """
)


def test_errors_inside_sugar_name_the_file_line_and_the_path_as_written() -> None:
    problems = validate_text(BAD, "t.yaml")
    by_path = {p.path: p for p in problems}
    sql = by_path["workflow[0].tool[0].choose[0].do[0].sql"]
    assert sql.line == 13 and "unknown field `sql`" in sql.message
    jump = by_path["workflow[0].tool[0].choose[1].else.do[0].spec.policy.rules[0].else.then.to"]
    assert jump.line == 18 and "'nowhere'" in jump.message


@pytest.mark.parametrize(
    "tool, line, path, words",
    [
        (
            "- name: w\n  while: 3\n  do: [{name: a, kind: noop}]\n",
            8,
            "workflow[0].tool[0].while",
            "condition",
        ),
        ("- name: w\n  while: true\n  do: []\n", 9, "workflow[0].tool[0].do", "at least one task"),
        ("- until: true\n  do: [{name: a, kind: noop}]\n", 7, "workflow[0].tool[0]", "needs `name"),
        ("- name: w\n  while: true\n  do: [{kind: noop}]\n", 9, "workflow[0].tool[0].do[0]", "needs `name"),
        (
            "- name: c\n  choose:\n    - else: {do: []}\n    - when: true\n      do: []\n",
            9,
            "workflow[0].tool[0].choose[0]",
            "must be the last",
        ),
        ("- name: c\n  choose: []\n", 8, "workflow[0].tool[0].choose", "non-empty list"),
        (
            "- name: c\n  choose: [{when: true, do: []}]\n  kind2: x\n",
            9,
            "workflow[0].tool[0].kind2",
            "unknown key",
        ),
        (
            "- name: c\n  while: true\n  until: true\n  do: [{name: a, kind: noop}]\n",
            7,
            "workflow[0].tool[0]",
            "its own item",
        ),
    ],
)
def test_malformed_sugar_is_reported_at_its_own_line(tool: str, line: int, path: str, words: str) -> None:
    problems = validate_text(_doc(tool), "t.yaml")
    assert any(p.line == line and p.path == path and words in p.message for p in problems), problems


def test_duplicate_generated_label_is_reported_at_the_sugar() -> None:
    problems = validate_text(
        _doc("- name: w\n  while: true\n  do: [{name: a, kind: noop}]\n- {name: w.end, kind: noop}\n"),
        "t.yaml",
    )
    assert any("duplicate task label 'w.end'" in p.message and p.line == 10 for p in problems), problems


def test_the_docs_example_and_the_hand_written_equivalent_validate() -> None:
    assert validate_text(EXAMPLE.read_text(), str(EXAMPLE)) == []
    hand = ROOT / "tests" / "fixtures" / "sugar" / "hand_written.yaml"
    assert validate_text(hand.read_text(), str(hand)) == []


def test_noetl_compile_prints_the_canonical_playbook_and_its_debug_map(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compile", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    body, debug = out.split("# debug map")
    assert "choose" not in yaml.safe_load(body)["workflow"][0]["tool"][1]
    assert validate_text(body, "compiled.yaml") == []
    assert "route.end (merge) <- " in debug
    assert main(["compile", str(EXAMPLE), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["problems"] == [] and {d["label"] for d in data["debug_map"]} >= {
        "route",
        "pages",
        "poll.test",
    }
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    assert main(["compile", str(bad)]) == 2
    assert "bad.yaml:13: workflow[0].tool[0].choose[0].do[0].sql" in capsys.readouterr().err


OLD = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: old}
workflow:
  - step: start
    tool:
      - {name: first, kind: noop, result: 1}
      - name: maybe
        kind: noop
        when: "{{ workload.flag }}"
        result: 2
"""


def test_migrate_is_canonical_by_default_and_writes_choose_with_sugar() -> None:
    plain = migrate_text(OLD, "old.yaml")
    assert plain.problems == [] and "choose" not in plain.text and "maybe_gate" in plain.text
    sugared = migrate_text(OLD, "old.yaml", sugar=True)
    assert sugared.problems == []
    tool = yaml.safe_load(sugared.text or "")["workflow"][0]["tool"]
    assert tool[1] == {
        "name": "maybe_when",
        "choose": [{"when": "{{ workload.flag }}", "do": [{"name": "maybe", "kind": "noop", "result": 2}]}],
    }
    assert "--sugar" in sugared.notes[0].message


def test_the_schema_takes_sugar_named_and_labelled() -> None:
    """Editors complete and flag both forms: `- name: x, choose: ...` and `- x: {choose: ...}`."""
    jsonschema = pytest.importorskip("jsonschema")
    from noetl.dsl.schema import playbook_json_schema

    validator = jsonschema.Draft202012Validator(playbook_json_schema())
    branch = {"when": "{{ true }}", "do": [{"name": "a", "kind": "noop"}]}

    def doc(item: dict[str, Any]) -> dict[str, object]:
        return {
            "apiVersion": "noetl.io/v2",
            "kind": "Playbook",
            "metadata": {"name": "s"},
            "workflow": [{"step": "start", "tool": [item]}],
        }

    for item in (
        {"name": "route", "choose": [branch]},
        {"route": {"choose": [branch]}},
        {"pages": {"while": "{{ false }}", "do": [{"name": "f", "kind": "noop"}]}},
    ):
        errors = [e.message for e in validator.iter_errors(doc(item))]
        assert errors == [], (item, errors)
    bad = [e.message for e in validator.iter_errors(doc({"route": {"choose": [branch], "chose": 1}}))]
    assert bad, "an unknown key in labelled sugar passes the schema"
