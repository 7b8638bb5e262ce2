"""Small builders for inline playbooks, so each test shows only the part it is about."""

from __future__ import annotations

import textwrap

from noetl.dsl import validate_text
from noetl.dsl.errors import Problem

HEADER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t}
"""

MINIMAL_WORKFLOW = """\
workflow:
  - step: start
    tool: {kind: noop}
"""


def playbook(body: str = MINIMAL_WORKFLOW, header: str = HEADER) -> str:
    return header + textwrap.dedent(body)


def steps(workflow: str, root: str = "") -> str:
    """A playbook whose ``workflow:`` list is ``workflow`` (indented YAML of steps)."""
    return playbook(textwrap.dedent(root) + "workflow:\n" + textwrap.indent(textwrap.dedent(workflow), "  "))


def problems(text: str) -> list[Problem]:
    return validate_text(text, "t.yaml")


def find(found: list[Problem], path: str) -> Problem:
    for p in found:
        if p.path == path:
            return p
    raise AssertionError(f"no problem at {path!r}; got: " + "; ".join(str(p) for p in found))


NOOP_START = "- step: start\n  tool: {kind: noop}\n"


def task_with_rules(rules: str, extra_step: str = "", tasks_after: str = "") -> str:
    """A start step whose single task ``t`` has ``rules`` (YAML list, indented 0)."""
    rules_block = "\n".join("          " + line for line in rules.strip().splitlines())
    return steps(f"""\
- step: start
{extra_step}  tool:
    - name: t
      kind: noop
      spec:
        policy:
          rules:
{rules_block}
{tasks_after}""")


def check_case(text: str, path: str, needles: list[str]) -> None:
    """The problem at ``path`` exists and its message holds every needle."""
    problem = find(problems(text), path)
    for needle in needles:
        assert needle in problem.message, f"{needle!r} not in {problem}"
    assert problem.file == "t.yaml"
    assert problem.line >= 1
