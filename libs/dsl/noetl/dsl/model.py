"""The normalized playbook: what the engine and the worker run.

The user-facing document (``document.py``, pydantic, closed-world) is validated first; it is then
normalized into these small frozen dataclasses, in which every task has a label, every policy is
typed by scope, and every node remembers its path (``workflow[2].tool[0]``) and line for messages.
Templates stay as strings here; ``templates.py`` compiles them once per playbook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Do = Literal["continue", "retry", "jump", "break", "fail"]
DO_VALUES: tuple[str, ...] = ("continue", "retry", "jump", "break", "fail")


@dataclass(frozen=True)
class Rule:
    """``{when: ..., then: {...}}``; ``when is None`` marks the ``else`` rule."""

    when: str | None
    then: dict[str, Any]
    path: str = ""

    @property
    def is_else(self) -> bool:
        return self.when is None


@dataclass(frozen=True)
class Policy:
    rules: tuple[Rule, ...]
    on_unmatched: Literal["continue", "fail"] = "continue"
    path: str = ""


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    config: dict[str, Any]  # every field but name/kind/spec (url, code, args, result, ...)
    spec: dict[str, Any]  # the task's own spec, policy removed
    policy: Policy | None
    path: str = ""
    line: int = 0


@dataclass(frozen=True)
class Arc:
    step: str
    when: str | None
    args: dict[str, Any] | None
    spec: dict[str, Any] | None = None
    path: str = ""


@dataclass(frozen=True)
class Next:
    mode: Literal["exclusive", "inclusive"]
    arcs: tuple[Arc, ...]
    path: str = ""


@dataclass(frozen=True)
class Loop:
    in_: Any  # usually a template string; a literal list is allowed
    iterator: str
    mode: Literal["sequential", "parallel"] = "sequential"
    max_in_flight: int = 16
    spec: dict[str, Any] = field(default_factory=dict)  # loop.spec minus mode/max_in_flight/policy
    path: str = ""
    reducers: dict[str, str] = field(default_factory=dict)  # ctx key -> reducer (SEMANTICS §20)
    exec: Literal["distributed", "local"] = "distributed"  # SEMANTICS §21


@dataclass(frozen=True)
class Lifecycle:
    """``step.spec.policy.lifecycle`` (SEMANTICS §16, §17): time limits and an awaited signal."""

    timeout_s: float | None = None
    deadline_s: float | None = None
    await_signal: str | None = None
    await_timeout_s: float | None = None
    # who may answer (docs/security.md#principals): roles and namespaces, empty meaning any
    await_roles: tuple[str, ...] = ()
    await_namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    name: str
    desc: str | None
    spec: dict[str, Any]  # step.spec, policy removed (knobs that flow down to tasks)
    admit: Policy | None  # step.spec.policy.admit (then: {allow: bool})
    failure_mode: Literal["fail_fast", "best_effort"]
    loop: Loop | None
    tool: tuple[Task, ...]  # empty for a pure router step
    next: Next | None
    path: str = ""
    line: int = 0
    lifecycle: Lifecycle | None = None

    def task_index(self, label: str) -> int:
        for i, t in enumerate(self.tool):
            if t.name == label:
                return i
        raise KeyError(label)


@dataclass(frozen=True)
class Metadata:
    name: str
    path: str | None = None
    version: str | None = None
    description: str | None = None


@dataclass(frozen=True)
class KeychainEntry:
    name: str
    kind: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Playbook:
    metadata: Metadata
    keychain: tuple[KeychainEntry, ...]
    executor: dict[str, Any]  # the raw executor mapping; executor.spec flows down
    workload: dict[str, Any]
    workflow: tuple[Step, ...]
    workbook: dict[str, dict[str, Any]]  # task templates by name (raw mappings)
    source: str = ""  # the YAML text it was parsed from
    file: str = "<playbook>"
    digest: str = ""  # sha256 hex of the source text

    @property
    def steps(self) -> dict[str, Step]:
        return {s.name: s for s in self.workflow}

    def step(self, name: str) -> Step:
        for s in self.workflow:
            if s.name == name:
                return s
        raise KeyError(name)
