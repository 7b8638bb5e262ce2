"""Template names against the scope they are used in, and ctx/args keys against what was written.

Where a template runs decides what it can see (SEMANTICS §4-§5): arcs, admission and `loop.in`
run on the server (`workload`, `ctx`, `args`, `execution_id`, `event`); task fields run on the
worker (no `event`; `keychain`, the pipeline locals, earlier task results by label, and `iter`
in loop steps); a task's policy rules add `outcome`. A name outside its scope is undefined in
every run, so it is an error (a warning when the template guards it with `default`).

Keys: a ctx key is *definitely written* before a step when every path from `start` passes a
step that may write it (a must-analysis over the net); within a pipeline, the tasks that can run
before the reading task count too. An args key must be in the `args` of every incoming arc.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.analysis.context import Analysis, admit_rule_path, arc_path, rule_path, task_path
from noetl.dsl.analysis.exprs import ABSENT, UNKNOWN
from noetl.dsl.analysis.petri import Net, verdicts
from noetl.dsl.analysis.pipelines import Edge, reaching
from noetl.dsl.analysis.refs import Ref, value_refs
from noetl.dsl.model import Step
from noetl.dsl.yamlload import Path

SERVER = frozenset({"workload", "ctx", "args", "execution_id", "event"})
WORKER = frozenset({"workload", "keychain", "ctx", "args", "execution_id", "_prev", "_task", "_attempt"})
LOCALS = frozenset({"_prev", "_task", "_attempt"})
LEGACY = {
    "vars": "`vars` belongs to the older drafts: state lives in `ctx` (written with set_ctx)",
    "response": "`response` belongs to the older drafts: use `outcome.result` in a task policy, "
    "`event.result` in an arc",
    "result": "`result` belongs to the older drafts: use `outcome.result` in a task policy, "
    "`event.result` in an arc, `_prev` in a task",
    "this": "`this` belongs to the older drafts: use `outcome` in a task policy, `event` in an arc",
    "_retry": "`_retry` belongs to the older drafts: use `_attempt`",
}
_SERVER_WHERE = "arcs, admission and loop.in run on the server"


class _Sites:
    def __init__(self, a: Analysis, i: int, step: Step) -> None:
        self.items: list[tuple[str, Path, Ref, int | None]] = []
        if step.admit is not None:
            for r, rule in enumerate(step.admit.rules):
                self._add("server", admit_rule_path(i, r), {"when": rule.when, "then": rule.then}, None)
        if step.loop is not None:
            self._add("server", ("workflow", i, "loop"), {"in": step.loop.in_}, None)
        for j, task in enumerate(step.tool):
            config = {k: v for k, v in task.config.items() if k != "code"}
            self._add("task", task_path(i, j), config, j)
            for r, rule in enumerate(task.policy.rules if task.policy else ()):
                self._add("policy", rule_path(i, j, r), {"when": rule.when, "then": rule.then}, j)
        for k, arc in enumerate(step.next.arcs if step.next else ()):
            self._add("arc", arc_path(i, k), {"when": arc.when, "args": arc.args}, None)

    def _add(self, zone: str, base: Path, value: Any, j: int | None) -> None:
        for where, ref in value_refs(value):
            self.items.append((zone, (*base, *where), ref, j))


def _labels(a: Analysis) -> dict[str, str]:
    return {t.name: s.name for s in a.playbook.workflow for t in s.tool}


def _allowed(step: Step, zone: str) -> frozenset[str]:
    if zone in ("server", "arc"):
        return SERVER
    names = WORKER | {t.name for t in step.tool} | ({"iter"} if step.loop is not None else set())
    return names | {"outcome"} if zone == "policy" else names


def _names(a: Analysis, step: Step, sites: _Sites, labels: dict[str, str]) -> None:
    for zone, path, ref, _ in sites.items:
        allowed = _allowed(step, zone)
        if ref.name in allowed:
            continue
        code, message = "name-out-of-scope", _why(ref.name, step, zone, labels)
        if message is None:
            code = "unknown-name"
            message = LEGACY.get(ref.name) or (
                f"`{ref.name}` is not defined here (names here: {', '.join(sorted(allowed))})"
            )
        if ref.guarded:
            message += "; the template guards it, so the default always applies"
        a.add(code, path, message, guarded=ref.guarded)


def _why(name: str, step: Step, zone: str, labels: dict[str, str]) -> str | None:
    server = zone in ("server", "arc")
    if name == "iter":
        if step.loop is None:
            return f"`iter` exists only in steps with a `loop`, and step `{step.name}` has none"
        return f"`iter` is per-iteration state on the worker; {_SERVER_WHERE} and never see it"
    if name == "outcome":
        return "`outcome` exists only in a task's `spec.policy.rules` (the outcome being decided on)"
    if name == "event":
        return (
            "`event` exists only in arcs (`next.arcs`), admission and `loop.in` (the event that ended a step)"
        )
    if name == "keychain":
        return f"`keychain` is resolved only on the worker, in task fields; {_SERVER_WHERE}"
    if name in LOCALS:
        return f"`{name}` is a pipeline local: it exists only in a step's tasks; {_SERVER_WHERE}"
    if name in labels:
        if server:
            return (
                f"`{name}` is a task result, visible only inside its pipeline; arcs see the step "
                "result as `event.result` (or pass values with set_ctx)"
            )
        return (
            f"`{name}` is a task of step `{labels[name]}`: task results are visible only inside "
            "their own pipeline; pass the value with set_ctx or an arc's args"
        )
    return None


def _definitely_written(a: Analysis, net: Net) -> dict[str, set[str]]:
    steps = {s.name: s for s in a.playbook.workflow}
    everything = set(a.ctx_writers)
    dw = {name: (set() if name == "start" else set(everything)) for name in net.reachable}
    writes = {name: a.writes_of(steps[name]) for name in net.reachable}
    changed = True
    while changed:
        changed = False
        for name in net.reachable:
            if name == "start":
                continue
            preds = [p for p in net.preds(name) if p in net.reachable and p not in net.never_admits]
            new = set.intersection(*(dw[p] | writes[p] for p in preds)) if preds else set()
            if new != dw[name]:
                dw[name], changed = new, True
    return dw


class _OnlyMissing(dict):  # type: ignore[type-arg]
    """ctx where one key is missing and every other is unknown."""

    def __init__(self, missing: str) -> None:
        super().__init__()
        self.missing = missing

    def get(self, key: object, default: object = None) -> object:
        return ABSENT if key == self.missing else UNKNOWN


def _admitted(step: Step, key: str) -> bool:
    """Whether the step's admission lets no token in while ctx `key` is missing (a join that
    waits for `ctx.users is defined` guarantees `ctx.users` to its tasks and arcs)."""
    if step.admit is None:
        return False
    return all(v is False for v in verdicts(step.admit, {"ctx": _OnlyMissing(key)}))


def _ctx(a: Analysis, step: Step, sites: _Sites, before: set[str], edges: dict[str, list[Edge]]) -> None:
    labels = [t.name for t in step.tool]
    for zone, path, ref, j in sites.items:
        if ref.name != "ctx" or ref.key is None or ref.guarded:
            continue
        have = set(before)
        if zone == "arc":
            have |= a.writes_of(step)
        elif j is not None:
            have |= a.writes_of(step, {labels.index(t) for t in reaching(edges, labels[j])})
        if ref.key in have or (zone != "server" and _admitted(step, ref.key)):
            continue
        writers = sorted({w for w, _ in a.ctx_writers.get(ref.key, [])})
        if writers:
            why = f"it is written only by {', '.join(f'`{w}`' for w in writers)}, which some path skips"
        else:
            why = "nothing in the playbook writes it"
        a.add(
            "ctx-unwritten",
            path,
            f"ctx.{ref.key} is read on a path from `start` where nothing wrote it "
            f"({why}); guard it with `| default(...)` if that is intended",
        )


def _args(a: Analysis, step: Step, sites: _Sites, net: Net) -> None:
    incoming: list[tuple[str, int, Any]] = []
    for src in a.playbook.workflow:
        if src.name not in net.reachable or src.name in net.never_admits or src.next is None:
            continue
        for k, arc in enumerate(src.next.arcs):
            if arc.step == step.name and net.arc_fires.get((src.name, k)):
                incoming.append((src.name, k, arc.args))
    missing: dict[str, tuple[Path, list[str]]] = {}
    for _, path, ref, _ in sites.items:
        if ref.name != "args" or ref.key is None or ref.guarded or ref.key in missing:
            continue
        lacking = [
            f"the arc from `{s}` (workflow[{a.index(s)}].next.arcs[{k}])"
            for s, k, args in incoming
            if isinstance(args, dict | None) and ref.key not in (args or {})
        ]
        if step.name == "start":
            lacking.insert(0, "the start token (its args are empty)")
        if lacking:
            missing[ref.key] = (path, lacking)
    for key, (path, lacking) in missing.items():
        a.add(
            "args-missing",
            path,
            f"args.{key} is read here but not passed by {', '.join(lacking)}; "
            "add it to the arc's `args` or guard the read with `| default(...)`",
        )


def analyze_scopes(a: Analysis, net: Net, pipelines: dict[str, dict[str, list[Edge]]]) -> None:
    labels = _labels(a)
    dw = _definitely_written(a, net)
    for i, step in enumerate(a.playbook.workflow):
        sites = _Sites(a, i, step)
        _names(a, step, sites, labels)
        if step.name not in net.reachable:
            continue
        _ctx(a, step, sites, dw.get(step.name, set()), pipelines.get(step.name, {}))
        _args(a, step, sites, net)
