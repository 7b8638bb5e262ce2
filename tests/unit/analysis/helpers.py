"""Small playbooks for the analysis tests: a header around a workflow written as YAML text."""

from __future__ import annotations

import textwrap

from noetl.dsl.analysis import Finding, check_text

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: t}\n"


def playbook(workflow: str, extra: str = "") -> str:
    return (
        HEADER + extra + "workflow:\n" + textwrap.indent(textwrap.dedent(workflow).strip("\n"), "  ") + "\n"
    )


def findings(workflow: str, extra: str = "") -> list[Finding]:
    result = check_text(playbook(workflow, extra), "t.yaml")
    assert not result.problems, [str(p) for p in result.problems]
    return result.findings


def codes(workflow: str, extra: str = "") -> list[str]:
    return [f.code for f in findings(workflow, extra)]


def only(workflow: str, code: str, extra: str = "") -> list[Finding]:
    return [f for f in findings(workflow, extra) if f.code == code]
