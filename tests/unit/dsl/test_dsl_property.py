"""Whatever text it is given, validation answers with a list of problems and never raises."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noetl.dsl import load_playbook, validate_text
from noetl.dsl.errors import PlaybookInvalidError, Problem

KEYS = [
    "apiVersion",
    "kind",
    "metadata",
    "name",
    "workflow",
    "step",
    "tool",
    "next",
    "arcs",
    "spec",
    "policy",
    "rules",
    "when",
    "then",
    "else",
    "do",
    "to",
    "loop",
    "in",
    "iterator",
    "mode",
    "admit",
    "set_ctx",
    "workbook",
    "tasks",
    "task",
    "vars",
    "case",
    "eval",
    "keychain",
    "allow",
    "max_in_flight",
    "_x",
    "ctx",
]
WORDS = [
    "start",
    "noop",
    "http",
    "jump",
    "retry",
    "parallel",
    "inclusive",
    "{{ x }}",
    "{{ x",
    "{% if %}",
    "noetl.io/v2",
    "Playbook",
    "",
    "task_0",
    "\u00e9",
    "*",
    "&",
    "- a",
    ": b",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, width=16),
    st.sampled_from(WORDS),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=5)), inner, max_size=5),
    ),
    max_leaves=25,
)

BASE: dict[str, Any] = yaml.safe_load("""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: p}
workbook: {tasks: {w: {kind: noop}}}
workflow:
  - step: start
    loop: {in: [1, 2], iterator: x, spec: {mode: parallel}}
    tool:
      - name: a
        kind: noop
        spec:
          policy: {rules: [{when: "{{ true }}", then: {do: jump, to: b}}, {else: {then: {do: continue}}}]}
      - b: {kind: workbook, task: w}
    next:
      spec: {mode: inclusive}
      arcs: [{step: end, when: "{{ event.name == 'loop.done' }}", args: {n: 1}}]
  - step: end
    tool: {kind: noop}
""")


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*path, i))
    return out


@st.composite
def near_valid(draw: st.DrawFn) -> Any:
    """The base playbook with a few of its values replaced, deleted or given extra keys."""
    doc = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for seg in path[:-1]:
            parent = parent[seg]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(KEYS))] = draw(values)
    return doc


def _dump(doc: Any) -> str:
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


texts = st.one_of(
    values.map(_dump),
    near_valid().map(_dump),
    st.text(max_size=80),
    st.lists(
        st.sampled_from(
            ["a:", " - b", "  c: {", "&x", "*x", "[", "]", "'", "\n", "  ", "---", "{{", "? ", "!!int"]
        ),
        max_size=12,
    ).map("".join),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts)
def test_validate_text_only_ever_returns_problems(text: str) -> None:
    found = validate_text(text, "p.yaml")
    assert isinstance(found, list)
    assert all(isinstance(p, Problem) and p.file == "p.yaml" and p.line >= 1 for p in found)
    try:
        load_playbook(text, "p.yaml")
    except PlaybookInvalidError as e:
        assert e.problems == found
    else:
        assert found == []


def test_the_base_playbook_is_valid() -> None:
    assert validate_text(_dump(BASE)) == []
