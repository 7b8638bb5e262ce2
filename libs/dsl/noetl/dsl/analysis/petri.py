"""The playbook as a Petri net: steps are transitions, arcs are places, tokens flow from `start`.

Each `when` is treated as a free choice (it may go either way) unless the three-valued evaluator
proves it false, or true, for a way the step can end: a step without a loop ends with
``step.done`` or ``step.failed``, a loop step with ``loop.done`` or ``step.failed``, a router
with ``step.done``. That is enough to find dead arcs (a `when` on ``loop.done`` of a step
without a loop), steps no token reaches, steps from which every path cycles forever, and joins
whose admission no reachable ctx can satisfy.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.analysis.context import Analysis, admit_rule_path, arc_path, step_path
from noetl.dsl.analysis.exprs import ABSENT, UNKNOWN, evaluate
from noetl.dsl.analysis.refs import template_refs
from noetl.dsl.model import Policy, Step

MAX_COMBINATIONS = 4096
_EVENT_NAME = re.compile(r"""['"]((?:step|loop)\.[a-z_.]+)['"]""")


def terminal_events(step: Step) -> list[dict[str, Any]]:
    """What ``event`` can be when the step's arcs are evaluated (SEMANTICS §7-§8)."""
    done = {"status": "success", "result": UNKNOWN, "error": None}
    failed = {"name": "step.failed", "status": "error", "result": None, "error": UNKNOWN, "payload": UNKNOWN}
    if step.loop is not None:
        counts = {"total": UNKNOWN, "done": UNKNOWN, "failed": UNKNOWN, "result": UNKNOWN}
        return [{"name": "loop.done", **done, "payload": counts}, failed]
    if step.tool:
        return [{"name": "step.done", **done, "payload": UNKNOWN}, failed]
    out = [{"name": "step.done", **done, "payload": UNKNOWN}]
    # a router fails on an admission error, or when the signal it awaits does not come in time
    awaits_with_limit = step.lifecycle is not None and bool(step.lifecycle.await_timeout_s)
    return [*out, failed] if step.admit is not None or awaits_with_limit else out


@dataclass
class Net:
    edges: dict[str, set[str]] = field(default_factory=dict)
    arc_fires: dict[tuple[str, int], list[str]] = field(default_factory=dict)  # events it can fire on
    can_end: set[str] = field(default_factory=set)
    never_admits: set[str] = field(default_factory=set)
    reachable: set[str] = field(default_factory=set)

    def preds(self, name: str) -> set[str]:
        return {s for s, targets in self.edges.items() if name in targets}

    def ancestors(self, name: str) -> set[str]:
        seen: set[str] = set()
        todo = list(self.preds(name))
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo.extend(self.preds(s))
        return seen


def _arcs(a: Analysis, step: Step, net: Net) -> None:
    net.edges[step.name] = set()
    if step.next is None or not step.next.arcs:
        net.can_end.add(step.name)
        return
    exclusive = step.next.mode != "inclusive"
    for event in terminal_events(step):
        env = {"event": event}
        blocked = False
        definite = False
        for k, arc in enumerate(step.next.arcs):
            value = evaluate(arc.when, env)
            if value is not False and not blocked:
                net.arc_fires.setdefault((step.name, k), []).append(event["name"])
                net.edges[step.name].add(arc.step)
            net.arc_fires.setdefault((step.name, k), [])
            if value is True:
                definite = True
                blocked = blocked or exclusive
        if not definite:
            net.can_end.add(step.name)
    if step.admit is not None:
        net.can_end.add(step.name)  # a denied token is consumed


def verdicts(policy: Policy, env: dict[str, Any]) -> set[Any]:
    """Every verdict admission can reach in ``env`` (first match wins, `else` last, no match allows)."""
    out: set[Any] = set()
    fallback = next((r for r in policy.rules if r.is_else), None)
    for rule in policy.rules:
        if rule.is_else:
            continue
        value = evaluate(rule.when, env)
        if value is False:
            continue
        out.add(evaluate(rule.then.get("allow", True), env))
        if value is True:
            return out
    out.add(True if fallback is None else evaluate(fallback.then.get("allow", True), env))
    return out


def _admission(a: Analysis, step: Step, net: Net) -> None:
    assert step.admit is not None
    keys: set[str] = set()
    for rule in step.admit.rules:
        for source in (rule.when, rule.then.get("allow")):
            for ref in template_refs(source) if isinstance(source, str) else ():
                if ref.name == "ctx":
                    if ref.key is None:
                        return  # a dynamic ctx read: nothing to prove
                    keys.add(ref.key)
    before = net.ancestors(step.name)
    options: list[list[Any]] = []
    for key in sorted(keys):
        values = [ABSENT]
        for writer, value in a.ctx_writers.get(key, []):
            if writer in before and all(value != v or type(value) is not type(v) for v in values):
                values.append(value)
        options.append(values)
    if any(len(o) > 1 and UNKNOWN in o for o in options):
        return
    total = 1
    for o in options:
        total *= len(o)
    if total > MAX_COMBINATIONS:
        return
    for combo in itertools.product(*options):
        ctx = {k: v for k, v in zip(sorted(keys), combo, strict=True) if v is not ABSENT}
        if any(v is not False for v in verdicts(step.admit, {"ctx": ctx})):
            return
    net.never_admits.add(step.name)
    i = a.index(step)
    why = []
    for key in sorted(keys):
        writers = sorted({w for w, _ in a.ctx_writers.get(key, [])})
        early = [w for w in writers if w in before]
        if not writers:
            why.append(f"nothing writes ctx.{key}")
        elif not early:
            why.append(
                f"ctx.{key} is written only by {_names(writers)}, which cannot run before `{step.name}`"
            )
    fanouts = sorted(
        s.name
        for s in a.playbook.workflow
        if s.name in before and s.next is not None and s.next.mode == "inclusive" and len(s.next.arcs) > 1
    )
    lead = f"the inclusive fan-out at {_names(fanouts)} feeds this join, but its" if fanouts else "its"
    detail = "; ".join(why) or "no value the playbook writes to those keys makes a rule allow"
    a.add(
        "admission-never-allows",
        admit_rule_path(i, 0)[:-2],
        f"{lead} admission can never allow: {detail}. Every token is skipped, so step "
        f"`{step.name}` never runs and its arcs never fire",
    )


def _names(names: list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names)


def _reach(a: Analysis, net: Net) -> None:
    todo = ["start"]
    while todo:
        name = todo.pop()
        if name in net.reachable:
            continue
        net.reachable.add(name)
        if name not in net.never_admits:
            todo.extend(net.edges.get(name, ()))


def _dead_arcs(a: Analysis, step: Step, net: Net) -> None:
    if step.next is None or step.name not in net.reachable or step.name in net.never_admits:
        return
    i = a.index(step)
    ends = [e["name"] for e in terminal_events(step)]
    for k, arc in enumerate(step.next.arcs):
        if net.arc_fires.get((step.name, k)):
            continue
        names = set(_EVENT_NAME.findall(arc.when or ""))
        foreign = sorted(names - set(ends))
        if evaluate(arc.when, {"event": UNKNOWN}) is not False and all(
            evaluate(arc.when, {"event": e}) is False for e in terminal_events(step)
        ):
            if foreign and step.loop is None:
                why = f"it tests for {', '.join(foreign)}, but step `{step.name}` has no loop"
            elif foreign:
                why = f"it tests for {', '.join(foreign)}, but step `{step.name}` is a loop step"
            else:
                why = "it is false"
            message = f"{why}: the step ends only with {' or '.join(ends)}, so this arc never fires"
        elif evaluate(arc.when, {"event": UNKNOWN}) is False:
            message = "its `when` is always false, so this arc never fires"
        else:
            message = "an earlier arc always fires first (the router is exclusive), so this arc never fires"
        a.add("arc-never-fires", (*arc_path(i, k), "when"), message)


def sccs(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                out.append(comp)
    return out


def _no_end(a: Analysis, net: Net) -> None:
    order = [s.name for s in a.playbook.workflow]
    live = {s: (set() if s in net.never_admits else net.edges.get(s, set())) for s in order}
    for comp in sccs([s for s in order if s in net.reachable], live):
        members = set(comp)
        if members & net.can_end or any(live[s] - members for s in comp):
            continue
        first = min(comp, key=order.index)
        cycle = " → ".join(f"`{s}`" for s in sorted(comp, key=order.index)) + f" → `{first}`"
        a.add(
            "no-end",
            step_path(a.index(first)),
            f"no way to an end: on every way these steps end, an arc fires that leads back ({cycle}), "
            "so a token that enters never leaves; give one arc a `when` that can be false",
        )


def analyze_net(a: Analysis) -> Net:
    net = Net()
    for step in a.playbook.workflow:
        _arcs(a, step, net)
    for step in a.playbook.workflow:
        if step.admit is not None:
            _admission(a, step, net)
    _reach(a, net)
    for i, step in enumerate(a.playbook.workflow):
        if step.name not in net.reachable:
            a.add(
                "unreachable-step",
                step_path(i),
                f"no arc that can fire leads to step `{step.name}`: it never runs",
            )
        _dead_arcs(a, step, net)
    _no_end(a, net)
    _awaits_in_fan_out(a, net)
    return net


def _awaits_in_fan_out(a: Analysis, net: Net) -> None:
    """A step awaiting a signal (SEMANTICS §17) downstream of an inclusive fan-out can hold several
    tokens at once; each waits for a signal of its own, which surprises whoever expects one signal
    to release them all. Correct as written, so a hint that says how it behaves. A signal nobody in
    the playbook sends is normal (people and other systems send it) and is not reported."""
    fans = {
        step.name
        for step in a.playbook.workflow
        if step.next is not None and step.next.mode == "inclusive" and len(step.next.arcs) > 1
    }
    for i, step in enumerate(a.playbook.workflow):
        lc = step.lifecycle
        if lc is None or not lc.await_signal or step.name not in net.reachable:
            continue
        if step.name in fans or not fans & net.ancestors(step.name):
            continue
        a.add(
            "await-in-fan-out",
            (*step_path(i), "spec", "policy", "lifecycle", "await"),
            f"step `{step.name}` awaits signal `{lc.await_signal}` after an inclusive fan-out: each token "
            "that reaches it waits for a signal of its own (one signal releases one token, in arrival "
            "order; signals sent early wait in a queue). Send one signal per branch, or join the "
            "branches (admission) before the step so one signal suffices",
        )
