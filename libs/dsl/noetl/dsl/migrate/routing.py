"""`next` in its older shapes, and `case` rules, as a v10 router plus task rules.

The drafts route two ways: a structural `next` (a name, a list of names, a list of
`{step, args}` or spec 002's list of arcs with `when`) and `case` rules whose `then.next` fires
when the rule matches, falling back to the structural `next` when none does (spec 004). In v10
both become `next.arcs`: exclusive when every trigger has one target (first match wins, the
structural arcs last), inclusive with explicit guards when some trigger fans out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.migrate.core import Migrator, Pipeline
from noetl.dsl.migrate.jinja import inner, rewrite, rewrite_all, wrap
from noetl.dsl.migrate.rules import arc_events, arc_renames, policy_events, policy_renames, retry_then
from noetl.dsl.yamlload import Path

_LEGACY_EVENT = re.compile(r"""['"](step\.enter|step\.exit|call\.done|call\.error)['"]""")


@dataclass
class Routing:
    arcs: list[tuple[dict[str, Any], Path | None]] = field(default_factory=list)  # structural
    case_arcs: list[tuple[int, str | None, list[tuple[dict[str, Any], Path | None]]]] = field(
        default_factory=list
    )
    mode: str | None = None
    fanout: bool = False  # the legacy list meant "schedule each"


def _arc(m: Migrator, item: Any, path: Path, loop: bool) -> dict[str, Any] | None:
    if isinstance(item, str):
        return m.flow({"step": item})
    if not isinstance(item, dict) or not isinstance(item.get("step"), str):
        m.cannot(path, "a `next` entry that names no step")
        return None
    arc: dict[str, Any] = {}
    m.put(arc, "step", item["step"], (*path, "step"))
    if "when" in item:
        m.put(arc, "when", rewrite_all(item["when"], arc_renames(m), arc_events(loop)), (*path, "when"))
    args = item.get("args", item.get("with"))
    if "with" in item:
        m.did((*path, "with"), "`with` on a transition became the arc's `args`")
    if args is not None:
        m.put(arc, "args", rewrite_all(args, arc_renames(m)), (*path, "args" if "args" in item else "with"))
    for key in item:
        if key not in ("step", "when", "args", "with", "spec"):
            m.cannot((*path, key), f"arc key `{key}` has no v10 form; dropped")
    if "spec" in item:
        m.put(arc, "spec", item["spec"], (*path, "spec"))
    if len(arc) <= 2 and all(isinstance(v, str) for v in arc.values()):
        m.flow(arc)
    return arc


def structural(m: Migrator, step: dict[str, Any], path: Path, loop: bool) -> Routing:
    r = Routing()
    spec = step.get("spec")
    if isinstance(spec, dict) and "next_mode" in spec:
        r.mode = spec.pop("next_mode")
        m.did((*path, "spec", "next_mode"), f"`spec.next_mode: {r.mode}` became `next.spec.mode`")
        if not spec:
            step.pop("spec")
    nxt = step.get("next")
    if nxt is None:
        return r
    where = (*path, "next")
    if isinstance(nxt, dict) and "arcs" in nxt:
        if isinstance(nxt.get("spec"), dict) and r.mode is None:
            r.mode = nxt["spec"].get("mode")
        for k, arc in enumerate(nxt.get("arcs") or []):
            r.arcs.append((arc, m.origin(nxt["arcs"], k)))
        return r
    items = [nxt] if isinstance(nxt, str | dict) else nxt if isinstance(nxt, list) else []
    if isinstance(nxt, str):
        m.did(where, f"`next: {nxt}` became `next: {{arcs: [{{step: {nxt}}}]}}`")
    elif isinstance(nxt, list):
        m.did(where, "`next` given as a list became `next.arcs`")
    for k, item in enumerate(items):
        at = (*where, k) if isinstance(nxt, list) else where
        if isinstance(item, dict) and ("then" in item or "else" in item):
            _conditional(m, item, at, loop, r)
            continue
        arc = _arc(m, item, at, loop)
        if arc is not None:
            r.arcs.append((arc, at))
    if len(r.arcs) > 1 and r.mode is None and not any("when" in a for a, _ in r.arcs):
        r.fanout = True
        m.did(where, "a list of unconditional targets schedules each of them: the router is inclusive")
    return r


def _conditional(m: Migrator, item: dict[str, Any], path: Path, loop: bool, r: Routing) -> None:
    """The old `next: [{when, then: [...], else: [...]}]` form."""
    cond = item.get("when")
    test = inner(rewrite(cond, arc_renames(m), arc_events(loop))) if isinstance(cond, str) else "true"
    for branch, guard in (("then", test), ("else", f"not ({test})")):
        targets = item.get(branch) or []
        for n, target in enumerate(targets if isinstance(targets, list) else [targets]):
            arc = _arc(m, target, (*path, branch, n), loop)
            if arc is not None:
                m.put(arc, "when", wrap(guard), (*path, "when"))
                r.arcs.append((arc, (*path, branch, n)))
    m.did(path, "a `next` entry with when/then/else became one arc per target, guarded by the condition")


@dataclass
class CaseWork:
    """What the `case` rules ask of the pipeline: task rules on the calling task, ctx writes when
    the step starts, and sinks."""

    rules: list[dict[str, Any]] = field(default_factory=list)
    init: dict[str, Any] = field(default_factory=dict)
    init_origin: Path | None = None
    sinks: list[tuple[dict[str, Any], str | None, Path]] = field(default_factory=list)


def _set_ctx(m: Migrator, value: Any, path: Path) -> dict[str, Any]:
    """`set: {ctx: {...}}` (or `set: {k: v}`) as the mapping for `set_ctx`."""
    if not isinstance(value, dict):
        m.cannot(path, "`set` that is not a mapping")
        return {}
    out: dict[str, Any] = {}
    for key, item in value.items():
        if key in ("ctx", "vars") and isinstance(item, dict):
            out.update(item)
        else:
            out[key] = item
    return out


@dataclass
class _Case:
    """One step's `case` translation under way: what every rule and action reads or adds to."""

    m: Migrator
    kind: str | None  # the kind of the step's last task: the rules' result shape
    loop: bool
    iterator: str | None
    r: Routing
    work: CaseWork = field(default_factory=CaseWork)


def translate_case(
    m: Migrator,
    step: dict[str, Any],
    path: Path,
    pipe: Pipeline,
    loop: bool,
    iterator: str | None,
    r: Routing,
) -> CaseWork:
    case = step.pop("case")
    m.did((*path, "case"), "`case` became `next.arcs` (routing) and task `spec.policy.rules` (actions)")
    bodies = pipe.bodies()
    c = _Case(m, bodies[-1][1].get("kind") if bodies else None, loop, iterator, r)
    for n, rule in enumerate(case if isinstance(case, list) else [case]):
        where = (*path, "case", n)
        if not isinstance(rule, dict):
            m.cannot(where, "a `case` entry that is not a mapping")
            continue
        _case_rule(c, n, rule, where)
    return c.work


def _case_rule(c: _Case, n: int, rule: dict[str, Any], where: Path) -> None:
    """One `case` entry: its `next` becomes arcs, its other actions one task rule."""
    m = c.m
    when = rule.get("when")
    then = rule.get("then")
    if isinstance(then, list):
        merged: dict[str, Any] = {}
        for part in then:
            merged.update(part if isinstance(part, dict) else {})
        then = merged
    if not isinstance(then, dict):
        m.cannot((*where, "then"), f"`then: {then!r}` is a placeholder, not actions: nothing to translate")
        return
    events = set(_LEGACY_EVENT.findall(when)) if isinstance(when, str) else set()
    task_when = (
        rewrite(when, policy_renames(m, c.kind, c.iterator), policy_events) if isinstance(when, str) else None
    )
    arc_when = rewrite(when, arc_renames(m), arc_events(c.loop)) if isinstance(when, str) else None
    task_then: dict[str, Any] = {}
    for action, value in then.items():
        at = (*where, "then", action)
        if action == "next":
            _case_next(c, n, value, at, arc_when, events)
        elif action == "retry":
            retry = retry_then(m, value, at)
            if retry is not None:
                task_then.update(retry)
        elif action == "set":
            values = rewrite_all(_set_ctx(m, value, at), policy_renames(m, c.kind, c.iterator))
            if events == {"step.enter"}:
                c.work.init.update(values)
                c.work.init_origin = c.work.init_origin or where
            else:
                task_then.setdefault("set_ctx", {}).update(values)
        elif action == "sink":
            c.work.sinks.append((value, task_when if events != {"step.exit"} else None, at))
        elif action == "fail":
            task_then["do"] = "fail"
        else:
            m.cannot(at, f"the `{action}` action has no v10 form" + _instead(action))
    if task_then:
        task_then.setdefault("do", "continue")
        if all(not isinstance(v, dict | list) for v in task_then.values()):
            m.flow(task_then)
        out: dict[str, Any] = {}
        m.put(out, "when", task_when if task_when is not None else "{{ true }}", (*where, "when"))
        m.put(out, "then", task_then, (*where, "then"))
        m.o.set(c.work.rules, len(c.work.rules), where)
        c.work.rules.append(out)


def _case_next(c: _Case, n: int, value: Any, at: Path, arc_when: str | None, events: set[str]) -> None:
    """`then.next` of the ``n``-th rule: its arcs, taken when the rule's condition holds."""
    m = c.m
    targets = value if isinstance(value, list) else [value]
    arcs: list[tuple[dict[str, Any], Path | None]] = []
    for k, target in enumerate(targets):
        arc = _arc(m, target, (*at, k) if isinstance(value, list) else at, c.loop)
        if arc is not None:
            arcs.append((arc, (*at, k) if isinstance(value, list) else at))
    c.r.case_arcs.append((n, arc_when, arcs))
    if c.loop and "call.done" in events:
        m.did(
            at,
            "routing on `call.done` of a loop step fires once, after the loop (loop.done): "
            "arcs are evaluated when a step run ends",
        )
    if "step.enter" in events:
        m.cannot(at, "routing on `step.enter` (before the step runs) has no v10 form")


def _instead(action: str) -> str:
    """What to write instead of a `case` action that has no v10 form."""
    if action in ("collect", "result"):
        return ": accumulate with set_iter/set_ctx in task rules, or let a task return the collection"
    if action == "call":
        return ": re-run a task with a `jump` rule and new values in set_iter"
    if action == "skip":
        return ": admission (`spec.policy.admit`) decides whether a step runs"
    return ""


def router(m: Migrator, step: dict[str, Any], path: Path, r: Routing) -> None:
    """Write ``next`` from the structural arcs and the case arcs."""
    fallback = r.arcs
    cases = [(n, cond, arcs) for n, cond, arcs in r.case_arcs if arcs]
    if not fallback and not cases:
        step.pop("next", None)
        return
    fans = r.fanout or r.mode == "inclusive" or any(len(arcs) > 1 for _, _, arcs in cases)
    out: list[Any] = []
    if not fans:
        for _, cond, arcs in cases:
            for arc, origin in arcs:
                if cond is not None:
                    arc = {"step": arc["step"], "when": cond, **{k: v for k, v in arc.items() if k != "step"}}
                m.put(out, None, arc, origin)
        for arc, origin in fallback:
            m.put(out, None, arc, origin)
    else:
        earlier: list[str] = []
        for _, cond, arcs in cases:
            test = inner(cond) if cond is not None else "true"
            guard = test if not earlier else f"({test}) and not ({' or '.join(earlier)})"
            for arc, origin in arcs:
                m.put(
                    out,
                    None,
                    {
                        "step": arc["step"],
                        "when": wrap(guard),
                        **{k: v for k, v in arc.items() if k not in ("step", "when")},
                    },
                    origin,
                )
            earlier.append(f"({test})")
        for arc, origin in fallback:
            if earlier:
                arc = {
                    "step": arc["step"],
                    "when": wrap(f"not ({' or '.join(earlier)})"),
                    **{k: v for k, v in arc.items() if k not in ("step", "when")},
                }
            m.put(out, None, arc, origin)
    nxt: dict[str, Any] = {}
    mode = "inclusive" if fans else r.mode
    if mode is not None and mode != "exclusive":
        m.put(nxt, "spec", m.flow({"mode": mode}), None)
    m.put(nxt, "arcs", out, m.origin(step, "next"))
    m.put(step, "next", nxt, m.origin(step, "next"))
