"""The playbook's net as a Mermaid flowchart, optionally painted with one execution.

Steps are nodes (a rectangle for a step with tasks, a stadium for a router, a subroutine box for
a loop step); arcs are edges labelled with their `when` (thick for an inclusive router, dotted
when `noetl check` proves the arc never fires). With a trace, every step shows its runs (status
and duration), fired arcs are green and the others grey and dashed.
"""

from __future__ import annotations

from noetl.dsl.analysis.coverage import Run, Trace
from noetl.dsl.model import Playbook, Step

MAX_LABEL = 48
STYLES = {
    "done": "fill:#e8f5e9,stroke:#2e7d32",
    "failed": "fill:#ffebee,stroke:#c62828",
    "skipped": "fill:#fff8e1,stroke:#f9a825",
    "running": "fill:#e3f2fd,stroke:#1565c0",
    "notrun": "fill:#f5f5f5,stroke:#9e9e9e,color:#757575",
}


def _inner(template: str) -> str:
    text = template.strip()
    return (
        text[2:-2].strip()
        if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1
        else text
    )


def _text(value: str) -> str:
    value = value if len(value) <= MAX_LABEL else value[: MAX_LABEL - 1] + "…"
    return value.replace('"', "#quot;").replace("<", "#lt;").replace(">", "#gt;")


def _duration(ms: float | None) -> str:
    if ms is None:
        return ""
    return f" {ms:.0f} ms" if ms < 10_000 else f" {ms / 1000:.1f} s"


def _runs(runs: list[Run]) -> str:
    if not runs:
        return "not run"
    if len(runs) <= 3:
        return ", ".join(f"{r.status}{_duration(r.duration_ms)}" for r in runs)
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    return ", ".join(f"{status} {n}x" for status, n in counts.items())


def _node(node_id: str, step: Step, detail: str) -> str:
    what = f"{len(step.tool)} task{'s' if len(step.tool) != 1 else ''}" if step.tool else "router"
    if step.loop is not None:
        what = f"loop {step.loop.mode} over {step.loop.iterator}" + (
            f", {len(step.tool)} tasks" if step.tool else ""
        )
    if step.admit is not None:
        what += ", admission"
    label = f"<b>{_text(step.name)}</b><br/>{what}" + (f"<br/>{detail}" if detail else "")
    if step.loop is not None:
        return f'  {node_id}[["{label}"]]'
    if not step.tool:
        return f'  {node_id}(["{label}"])'
    return f'  {node_id}["{label}"]'


def _status(runs: list[Run]) -> str:
    if not runs:
        return "notrun"
    statuses = {r.status for r in runs}
    for status in ("failed", "running", "done", "skipped"):
        if status in statuses:
            return status
    return "notrun"


def mermaid(playbook: Playbook, trace: Trace | None = None, dead: set[tuple[str, int]] | None = None) -> str:
    """Mermaid `flowchart TD` text; ``dead`` holds arcs `noetl check` proved never fire."""
    ids = {s.name: f"s{i}" for i, s in enumerate(playbook.workflow)}
    lines = ["flowchart TD", '  entry(("request")) --> ' + ids.get("start", "s0")]
    classes: dict[str, list[str]] = {}
    for step in playbook.workflow:
        runs = trace.step_runs(step.name) if trace is not None else []
        lines.append(_node(ids[step.name], step, _runs(runs) if trace is not None else ""))
        if trace is not None:
            classes.setdefault(_status(runs), []).append(ids[step.name])
    links: list[tuple[int, bool]] = []  # (link index, fired)
    link = 1  # the entry edge is link 0
    for step in playbook.workflow:
        if step.next is None:
            continue
        inclusive = step.next.mode == "inclusive"
        for k, arc in enumerate(step.next.arcs):
            parts = []
            if arc.when is not None:
                parts.append(_inner(arc.when))
            if arc.args:
                parts.append("args: " + ", ".join(arc.args))
            if trace is not None and trace.arcs.get((step.name, k)):
                parts.append(f"fired {trace.arcs[(step.name, k)]}x")
            label = f'|"{_text(" · ".join(parts))}"|' if parts else ""
            arrow = "-.->" if dead and (step.name, k) in dead else "==>" if inclusive else "-->"
            target = ids.get(arc.step, "missing")
            lines.append(f"  {ids[step.name]} {arrow}{label} {target}")
            links.append((link, bool(trace is not None and trace.arcs.get((step.name, k)))))
            link += 1
    if trace is not None:
        for name, style in STYLES.items():
            lines.append(f"  classDef {name} {style}")
        for name, members in classes.items():
            lines.append(f"  class {','.join(members)} {name}")
        fired = [str(n) for n, hit in links if hit]
        missed = [str(n) for n, hit in links if not hit]
        if fired:
            lines.append(f"  linkStyle {','.join(fired)} stroke:#2e7d32,stroke-width:3px")
        if missed:
            lines.append(f"  linkStyle {','.join(missed)} stroke:#9e9e9e,stroke-dasharray:4 4")
    return "\n".join(lines) + "\n"
