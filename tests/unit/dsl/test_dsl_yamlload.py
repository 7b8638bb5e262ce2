"""YAML loading: line numbers for every path, and refusal of what a playbook never needs."""

from __future__ import annotations

import pytest

from noetl.dsl.yamlload import MAX_NODES, LineMap, fmt_path, load_yaml

TEXT = """\
apiVersion: noetl.io/v2
workflow:
  - step: start
    tool:
      - name: a
        kind: noop
      - fetch:
          kind: http
          spec:
            policy:
              rules:
                - when: x
                  then: {do: continue}
                - else:
                    then: {do: jump, to: a}
"""


def test_every_key_and_item_has_its_line() -> None:
    loaded = load_yaml(TEXT)
    assert loaded.problems == []
    line = loaded.lines.line
    assert line(("apiVersion",)) == 1
    assert line(("workflow",)) == 2
    assert line(("workflow", 0)) == 3
    assert line(("workflow", 0, "tool", 1)) == 7
    assert line(("workflow", 0, "tool", 1, "fetch", "spec", "policy", "rules", 1)) == 14
    assert line(("workflow", 0, "tool", 1, "fetch", "spec", "policy", "rules", 1, "else", "then")) == 15


def test_a_missing_path_gets_its_nearest_ancestors_line() -> None:
    loaded = load_yaml(TEXT)
    assert loaded.lines.line(("workflow", 0, "tool", 0, "spec", "policy")) == 5


def test_aliases_map_normalized_paths_to_the_written_ones() -> None:
    lines = LineMap()
    lines.set(("workflow", 0, "tool", 1, "fetch", "url"), 9)
    lines.alias(("workflow", 0, "tool", 1), ("workflow", 0, "tool", 1, "fetch"))
    assert lines.line(("workflow", 0, "tool", 1, "url")) == 9


def test_fmt_path() -> None:
    assert (
        fmt_path(("workflow", 2, "tool", 0, "spec", "policy", "rules", 1, "then", "to"))
        == "workflow[2].tool[0].spec.policy.rules[1].then.to"
    )
    assert fmt_path(("workload", "a b", 0)) == 'workload["a b"][0]'
    assert fmt_path(()) == ""


def test_malformed_yaml_names_its_line() -> None:
    loaded = load_yaml("a: 1\nb: [1, 2\nc: 3\n", "f.yaml")
    assert loaded.data is None
    (problem,) = loaded.problems
    assert problem.file == "f.yaml"
    assert problem.message.startswith(f"line {problem.line}:")
    assert problem.line in (2, 3)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- a\n- b\n", "found a list"),
        ("just text\n", "found the scalar"),
        ("", "empty"),
        ("a: 1\n---\nb: 2\n", "single document"),
    ],
)
def test_the_root_must_be_one_mapping(text: str, needle: str) -> None:
    (problem,) = load_yaml(text).problems
    assert needle in problem.message


def test_alias_bomb_is_refused_quickly() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        levels.append(f"a{i}: &a{i} [{', '.join([prev] * 10)}]")
    (problem,) = load_yaml("\n".join(levels) + "\n").problems
    assert str(MAX_NODES) in problem.message


def test_recursive_alias_is_refused() -> None:
    (problem,) = load_yaml("a: &x [1, *x]\n").problems
    assert "recursive" in problem.message


def test_deep_nesting_is_refused() -> None:
    (problem,) = load_yaml("a: " + "[" * 150 + "]" * 150 + "\n").problems
    assert "deeper" in problem.message


def test_duplicate_keys_are_refused_but_merge_overrides_are_not() -> None:
    (problem,) = load_yaml("a: 1\nb: 2\na: 3\n").problems
    assert problem.line == 3 and "duplicate key 'a'" in problem.message and "line 1" in problem.message
    loaded = load_yaml("base: &b {x: 1, y: 2}\nc: {<<: *b, y: 3}\n")
    assert loaded.problems == []
    assert loaded.data["c"] == {"x": 1, "y": 3}


def test_python_tags_are_refused() -> None:
    (problem,) = load_yaml("a: !!python/object/apply:os.system [echo]\n").problems
    assert "line 1" in problem.message


def test_timestamps_stay_strings_and_keys_are_strings_as_written() -> None:
    data = load_yaml("when: 2024-01-02\non: 1\n200: ok\nnull: x\nn: 3\nflag: yes\n").data
    assert data == {"when": "2024-01-02", "on": 1, "200": "ok", "null": "x", "n": 3, "flag": True}
