"""Nested iteration (SEMANTICS §19): a child started from a loop iteration gives each of its own
iterations the caller's `iter` as `iter.parent`; its steps without a loop see no `iter`."""

from __future__ import annotations

from noetl.dsl import validate_text
from noetl.engine import decide, fold, new_state
from tests.unit.engine.helpers import answer, requested

CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop: {in: [a, b], iterator: x, spec: {mode: parallel}}
    tool: {kind: noop}
"""


def test_the_childs_iterations_carry_the_callers_iter_as_parent() -> None:
    ev = requested(CHILD)
    parent = {"city": "paris", "index": 0, "parent": {"country": "fr", "index": 3}}
    ev["payload"]["parent_iter"] = parent
    state = new_state(ev)
    first = decide(state, ev).commands
    assert len(first) == 1 and first[0].get("iter") is None  # a step without a loop: no iter
    log = [ev, answer(first[0])]
    cmds = decide(state, log[-1]).commands
    assert [c["iter"] for c in cmds] == [
        {"x": "a", "index": 0, "parent": parent},
        {"x": "b", "index": 1, "parent": parent},
    ]
    again = fold(log)
    assert again is not None and again.parent_iter == parent


def test_without_a_caller_there_is_no_parent() -> None:
    ev = requested(CHILD)
    state = new_state(ev)
    cmd = decide(state, ev).commands[0]
    cmds = decide(state, answer(cmd)).commands
    assert all("parent" not in c["iter"] for c in cmds)


def test_iter_parent_is_read_only() -> None:
    text = CHILD.replace(
        "tool: {kind: noop}\n",
        "tool: {kind: noop, spec: {policy: {rules: [{else: {then: {set_iter: {parent: 1}}}}]}}}\n",
        1,
    )
    problems = validate_text(text, "t.yaml")
    assert any("read-only" in p.message and p.path.endswith("set_iter.parent") for p in problems), problems
