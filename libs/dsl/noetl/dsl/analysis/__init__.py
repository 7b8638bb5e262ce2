"""Static analysis of playbooks beyond validation (``noetl check``).

check_text(text, file) -> CheckResult   problems (when invalid) or findings, never raises
check_playbook(playbook) -> list[Finding]

The net (``petri``), the pipelines (``pipelines``) and the template scopes (``scopes``) are
analysed in that order, each using what the one before found (which steps are reachable, which
tasks can run before which).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from noetl.dsl.analysis.context import Analysis
from noetl.dsl.analysis.petri import analyze_net
from noetl.dsl.analysis.pipelines import analyze_pipelines
from noetl.dsl.analysis.report import CODES, Finding, settle
from noetl.dsl.analysis.scopes import analyze_scopes
from noetl.dsl.errors import PlaybookInvalidError, Problem
from noetl.dsl.model import Playbook
from noetl.dsl.validate import load_playbook

__all__ = ["CODES", "CheckResult", "Finding", "check_playbook", "check_text"]


@dataclass
class CheckResult:
    problems: list[Problem] = field(default_factory=list)  # validation problems: nothing analysed
    findings: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "warning"]

    @property
    def hints(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "hint"]


def check_playbook(playbook: Playbook) -> list[Finding]:
    a = Analysis.build(playbook)
    net = analyze_net(a)
    pipelines = analyze_pipelines(a, net.reachable)
    analyze_scopes(a, net, pipelines)
    return settle(a.findings, playbook.source)


def check_text(text: str, file: str = "<playbook>") -> CheckResult:
    try:
        playbook = load_playbook(text, file)
    except PlaybookInvalidError as e:
        return CheckResult(problems=e.problems)
    return CheckResult(findings=check_playbook(playbook))
