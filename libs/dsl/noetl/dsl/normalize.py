"""Raw document → ``model.Playbook``: the one form the engine and worker run.

Runs only on documents that passed validation, so it reads without re-checking; every choice
the DSL leaves to defaults (task labels, modes, the fallback rule) is made here once, so the
server and the worker never apply defaults of their own.
"""

from __future__ import annotations

import hashlib
from typing import Any, Literal

from noetl.dsl.model import (
    Arc,
    KeychainEntry,
    Lifecycle,
    Loop,
    Metadata,
    Next,
    Playbook,
    Policy,
    Rule,
    Step,
    Task,
)
from noetl.dsl.shapes import task_entries
from noetl.dsl.yamlload import LineMap, Path, fmt_path

DEFAULT_MAX_IN_FLIGHT = 16
_LOOP_KNOBS = ("mode", "max_in_flight", "policy")


def _when(value: Any) -> str | None:
    if isinstance(value, bool):
        return "{{ true }}" if value else "{{ false }}"
    return value  # type: ignore[no-any-return]  # text or None: validation checked it


def _rules(rules: list[Any], path: Path, *, task: bool) -> tuple[Rule, ...]:
    out: list[Rule] = []
    for i, rule in enumerate(rules):
        if "else" in rule:
            fallback = rule["else"]
            then = fallback["then"] if isinstance(fallback, dict) else rule["then"]
            when = None
        else:
            then, when = rule["then"], _when(rule["when"])
        then = dict(then)
        if task:
            then.setdefault("do", "continue")
        out.append(Rule(when=when, then=then, path=fmt_path((*path, i))))
    return tuple(out)


def _task_policy(spec: dict[str, Any], path: Path) -> Policy | None:
    policy = spec.get("policy")
    if not isinstance(policy, dict):
        return None
    ppath = (*path, "spec", "policy")
    return Policy(
        rules=_rules(policy["rules"], (*ppath, "rules"), task=True),
        on_unmatched=policy.get("on_unmatched", "continue"),
        path=fmt_path(ppath),
    )


def _workbook_task_policy(spec: dict[str, Any], path: Path, name: Any,
                          workbook: dict[str, Any]) -> Policy | None:
    """A workbook task's policy: its template's ``spec.policy`` with the task's own merged over it.

    SEMANTICS §13 runs the template "with the calling task's other fields merged over it", and
    a policy is one of those fields. ``rules`` is required in a policy, so a task with a policy
    of its own keeps its rules; ``on_unmatched`` it leaves out comes from the template. Rule
    paths point at the document that holds the rules, so errors name the right place.
    """
    template = workbook.get(name) if isinstance(name, str) else None
    template_spec = template.get("spec") if isinstance(template, dict) else None
    template_policy = template_spec.get("policy") if isinstance(template_spec, dict) else None
    own = spec.get("policy")
    if not isinstance(template_spec, dict) or not isinstance(template_policy, dict):
        return _task_policy(spec, path)
    if not isinstance(own, dict):
        return _task_policy(template_spec, ("workbook", "tasks", name))
    return _task_policy({"policy": {**template_policy, **own}}, path)


def _without(mapping: Any, *keys: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in keys} if isinstance(mapping, dict) else {}


def _tasks(step: dict[str, Any], path: Path, lines: LineMap, workbook: dict[str, Any]) -> tuple[Task, ...]:
    out: list[Task] = []
    for e in task_entries(step.get("step"), step.get("tool"), path):
        body = e.body or {}
        spec = body.get("spec") or {}
        if body["kind"] == "workbook":
            policy = _workbook_task_policy(spec, e.path, body.get("task"), workbook)
        else:
            policy = _task_policy(spec, e.path)
        out.append(
            Task(
                name=e.label or "",
                kind=body["kind"],
                config=_without(body, "name", "kind", "spec"),
                spec=_without(spec, "policy"),
                policy=policy,
                path=fmt_path(e.path),
                line=lines.line(e.raw),
            )
        )
    return tuple(out)


def _loop(loop: dict[str, Any] | None, path: Path) -> Loop | None:
    if loop is None:
        return None
    spec = loop.get("spec") or {}
    policy = raw if isinstance(raw := spec.get("policy"), dict) else {}
    mode: Literal["sequential", "parallel"] = spec.get("mode", policy.get("mode")) or "sequential"
    cap = spec.get("max_in_flight", policy.get("max_in_flight")) or DEFAULT_MAX_IN_FLIGHT
    return Loop(
        in_=loop["in"],
        iterator=loop["iterator"],
        mode=mode,
        max_in_flight=cap,
        spec=_without(spec, *_LOOP_KNOBS),
        path=fmt_path(path),
        reducers=dict(policy.get("reducers") or {}),
        exec=policy.get("exec") or "distributed",
    )


def _next(nxt: dict[str, Any] | None, path: Path) -> Next | None:
    if nxt is None:
        return None
    arcs = tuple(
        Arc(
            step=arc["step"],
            when=_when(arc.get("when")),
            args=arc.get("args"),
            spec=arc.get("spec"),
            path=fmt_path((*path, "arcs", k)),
        )
        for k, arc in enumerate(nxt["arcs"])
    )
    mode: Literal["exclusive", "inclusive"] = (nxt.get("spec") or {}).get("mode") or "exclusive"
    return Next(mode=mode, arcs=arcs, path=fmt_path(path))


def _step(step: dict[str, Any], i: int, lines: LineMap, workbook: dict[str, Any]) -> Step:
    path: Path = ("workflow", i)
    spec = step.get("spec") or {}
    policy = spec.get("policy") or {}
    admit = policy.get("admit")
    failure = policy.get("failure") or {}
    return Step(
        name=step["step"],
        desc=step.get("desc"),
        spec=_without(spec, "policy"),
        admit=None
        if admit is None
        else Policy(
            rules=_rules(admit["rules"], (*path, "spec", "policy", "admit", "rules"), task=False),
            path=fmt_path((*path, "spec", "policy", "admit")),
        ),
        failure_mode=failure.get("mode", "fail_fast"),
        loop=_loop(step.get("loop"), (*path, "loop")),
        tool=_tasks(step, path, lines, workbook),
        next=_next(step.get("next"), (*path, "next")),
        path=fmt_path(path),
        line=lines.line(path),
        lifecycle=_lifecycle(policy.get("lifecycle")),
    )


def _lifecycle(lc: dict[str, Any] | None) -> Lifecycle | None:
    if not lc:
        return None
    wait = lc.get("await") or {}
    return Lifecycle(
        timeout_s=lc.get("timeout_s"),
        deadline_s=lc.get("deadline_s"),
        await_signal=wait.get("signal"),
        await_timeout_s=wait.get("timeout_s"),
        await_roles=tuple((wait.get("by") or {}).get("roles") or ()),
        await_namespaces=tuple((wait.get("by") or {}).get("namespaces") or ()),
    )


def normalize(doc: dict[str, Any], lines: LineMap, *, source: str, file: str) -> Playbook:
    """Build the normalized playbook from a document that passed validation."""
    meta = doc["metadata"]
    version = meta.get("version")
    workbook = dict((doc.get("workbook") or {}).get("tasks") or {})
    return Playbook(
        metadata=Metadata(
            name=meta["name"],
            path=meta.get("path"),
            version=None if version is None else str(version),
            description=meta.get("description"),
        ),
        keychain=tuple(
            KeychainEntry(name=k["name"], kind=k["kind"], extra=_without(k, "name", "kind"))
            for k in doc.get("keychain") or []
        ),
        executor=doc.get("executor") or {},
        workload=doc.get("workload") or {},
        workflow=tuple(_step(step, i, lines, workbook) for i, step in enumerate(doc["workflow"])),
        workbook=workbook,
        source=source,
        file=file,
        digest=hashlib.sha256(source.encode("utf-8")).hexdigest(),
    )
