"""A step's pipeline as a control-flow graph: tasks are nodes, directives are edges.

Each rule of a task's policy is a free choice (unless its `when` is provably false, or true,
which hides the rules after it); without an `else`, `on_unmatched` is a choice too; a task with
no policy continues. Only *explicit* exits count as a way out of a jump cycle: a `break`, a
`fail`, a bounded `retry`, a `continue` past the last task, a jump out of the cycle. The implicit
"error → fail" of a task without policy does not: a cycle that ends only when something breaks
ends only at ``spec.max_task_runs`` with ``task_run_limit``.
"""

from __future__ import annotations

from dataclasses import dataclass

from noetl.dsl.analysis.context import Analysis, rule_path, rule_then, task_path
from noetl.dsl.analysis.exprs import evaluate
from noetl.dsl.analysis.petri import sccs
from noetl.dsl.model import Step

END = "<end>"


@dataclass(frozen=True)
class Edge:
    target: str  # a task label or END
    do: str


def task_edges(a: Analysis, step: Step) -> dict[str, list[Edge]]:
    """Label → the edges its directives can take."""
    labels = [t.name for t in step.tool]
    out: dict[str, list[Edge]] = {}
    for j, task in enumerate(step.tool):
        after = labels[j + 1] if j + 1 < len(labels) else END
        rules = a.task_policy_rules(task)
        dos: list[tuple[str, str | None]] = []
        decided = False
        for rule in [r for r in rules if not r.is_else] + [r for r in rules if r.is_else][:1]:
            value = True if rule.is_else else evaluate(rule.when, {})
            if value is False:
                continue
            dos.append((str(rule.then.get("do", "continue")), rule.then.get("to")))
            if value is True:
                decided = True
                break
        if not rules:
            dos.append(("continue", None))
        elif not decided:
            on_unmatched = task.policy.on_unmatched if task.policy is not None else "continue"
            dos.append((on_unmatched, None))
        edges: list[Edge] = []
        for do, to in dos:
            if do == "continue":
                edges.append(Edge(after, do))
            elif do == "retry":
                edges += [Edge(task.name, do), Edge(END, do)]
            elif do == "jump" and to in labels:
                edges.append(Edge(str(to), do))
            else:
                edges.append(Edge(END, do))
        out[task.name] = edges
    return out


def _bounded_on_purpose(a: Analysis, step: Step) -> bool:
    """An explicit `max_task_runs` says the cycle ends at the limit on purpose (and an arc may
    route the resulting `task_run_limit`, as the conformance case does)."""
    specs = [(a.playbook.executor.get("spec") or {}), step.spec, *(t.spec for t in step.tool[:1])]
    if step.loop is not None:
        specs.append(step.loop.spec)
    return any(isinstance(s, dict) and "max_task_runs" in s for s in specs)


def _cycles(a: Analysis, step: Step, edges: dict[str, list[Edge]]) -> None:
    labels = [t.name for t in step.tool]
    graph = {k: {e.target for e in v if e.do != "retry" and e.target != END} for k, v in edges.items()}
    i = a.index(step)
    for comp in sccs(labels, graph):
        members = set(comp)
        if len(comp) == 1 and comp[0] not in graph[comp[0]]:
            continue
        exits = [e for s in comp for e in edges[s] if e.target == END or e.target not in members]
        if exits or _bounded_on_purpose(a, step):
            continue
        ordered = sorted(comp, key=labels.index)
        cycle = " → ".join(f"`{s}`" for s in ordered) + f" → `{ordered[0]}`"
        a.add(
            "jump-cycle-unbounded",
            task_path(i, labels.index(ordered[0])),
            f"jump cycle {cycle} has no way out: no rule on it breaks, fails, retries, or continues "
            "past the last task, so it ends only at spec.max_task_runs (task_run_limit); add a "
            "`break` rule, or set `spec.max_task_runs` on the step to say the cycle is bounded on purpose",
        )


def reaching(edges: dict[str, list[Edge]], target: str) -> set[str]:
    """Labels from which ``target`` can be reached by at least one edge."""
    preds: dict[str, set[str]] = {}
    for src, out in edges.items():
        for e in out:
            preds.setdefault(e.target, set()).add(src)
    seen: set[str] = set()
    todo = list(preds.get(target, ()))
    while todo:
        s = todo.pop()
        if s not in seen:
            seen.add(s)
            todo.extend(preds.get(s, ()))
    return seen


def _unreachable(a: Analysis, step: Step, edges: dict[str, list[Edge]]) -> None:
    labels = [t.name for t in step.tool]
    seen: set[str] = set()
    todo = labels[:1]
    while todo:
        s = todo.pop()
        if s in seen or s == END:
            continue
        seen.add(s)
        todo.extend(e.target for e in edges[s])
    i = a.index(step)
    for j, label in enumerate(labels):
        if label in seen:
            continue
        prev = labels[j - 1]
        jumps = sorted({e.target for e in edges[prev] if e.do == "jump"} if prev in seen else set())
        past = [t for t in jumps if t == END or labels.index(t) > j]
        if past:
            a.add(
                "task-jumped-over",
                task_path(i, j),
                f"every path jumps over task `{label}`: `{prev}` before it never continues "
                f"(it jumps to {', '.join(f'`{t}`' for t in jumps)}) and no jump targets `{label}`",
            )
        else:
            how = "never continues (it only breaks, fails or jumps back)" if prev in seen else "never runs"
            a.add(
                "task-unreachable",
                task_path(i, j),
                f"no path reaches task `{label}`: `{prev}` before it {how}, and no jump targets `{label}`",
            )


def _reducer_for(value: object) -> str:
    """A likely reducer for a write, from how it is spelled (`+ [x]` appends, a number sums)."""
    text = str(value)
    if "+ [" in text or "+[" in text:
        return "append"
    if "| combine" in text or "|combine" in text:
        return "merge"
    return "sum"


def _ctx_races(a: Analysis, step: Step) -> None:
    """A sequential loop that writes a ctx key without a reducer works only because its iterations
    run one at a time: switching it to `parallel` is then rejected (or, with a reducer added
    carelessly, changes the result). Say so while the loop is still sequential (SEMANTICS §20)."""
    if step.loop is None or step.loop.mode != "sequential":
        return
    i = a.index(step)
    seen: set[str] = set()
    for j, task in enumerate(step.tool):
        for r, rule in enumerate(a.task_policy_rules(task)):
            for key, value in (rule_then(rule).get("set_ctx") or {}).items():
                if key in step.loop.reducers or key in seen:
                    continue
                seen.add(key)
                then = ("else", "then") if rule.is_else else ("then",)
                a.add(
                    "ctx-race-if-parallel",
                    (*rule_path(i, j, r), *then, "set_ctx", key),
                    f"the sequential loop of step `{step.name}` writes ctx key `{key}` without a reducer: "
                    f"its iterations would race on it if the loop were made parallel; declare how writes "
                    f"combine in `loop.spec.policy.reducers` (e.g. `{key}: {_reducer_for(value)}`), "
                    "or keep it in `set_iter`",
                )


def analyze_pipelines(a: Analysis, reachable: set[str]) -> dict[str, dict[str, list[Edge]]]:
    out: dict[str, dict[str, list[Edge]]] = {}
    for step in a.playbook.workflow:
        if not step.tool:
            continue
        edges = out[step.name] = task_edges(a, step)
        if step.name in reachable:
            _cycles(a, step, edges)
            _unreachable(a, step, edges)
            _ctx_races(a, step)
    return out
