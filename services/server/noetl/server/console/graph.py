"""A playbook's net laid out for an SVG drawing: layers by breadth-first depth from ``start``.

Drawn on the server so the page needs no layout or diagram library (a Mermaid or Graphviz
bundle would be megabytes of JavaScript to ship in the wheel for air-gapped clusters). Playbooks
are small (tens of steps) and mostly flow downwards, so a layered layout with one barycentre pass
to cut crossings reads well; arcs that go back up (loops in the net) are drawn as curves on the
right so they never hide the forward flow. Nodes and arcs carry the step name and arc index, so
the page's script can repaint them from live state without knowing the layout.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from noetl.dsl.model import Playbook, Step

NODE_W, NODE_H = 184.0, 60.0
GAP_X, GAP_Y = 36.0, 64.0
MARGIN, TOP = 24.0, 64.0
MAX_NAME, MAX_LABEL = 24, 28


@dataclass
class Node:
    name: str
    x: float
    y: float
    shape: str  # task, router or loop
    what: str  # "2 tasks", "router", "loop parallel over file"
    title: str
    w: float = NODE_W
    h: float = NODE_H

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def short(self) -> str:
        return _short(self.name, MAX_NAME)

    @property
    def what_short(self) -> str:
        return _short(self.what, MAX_NAME + 6)


@dataclass
class Edge:
    source: str
    arc: int
    target: str
    d: str  # the SVG path
    label: str
    title: str
    lx: float
    ly: float
    inclusive: bool = False
    back: bool = False


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    width: float = 0.0
    height: float = 0.0
    entry: tuple[float, float] | None = None  # where the request comes in, above the first step


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _inner(template: str) -> str:
    text = template.strip()
    if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1:
        return text[2:-2].strip()
    return text


def _what(step: Step) -> tuple[str, str]:
    n = len(step.tool)
    tasks = f"{n} task{'s' if n != 1 else ''}"
    if step.loop is not None:
        shape, what = "loop", f"loop {step.loop.mode} over {step.loop.iterator}"
    elif step.tool:
        shape, what = "task", tasks
    else:
        shape, what = "router", "router"
    if step.admit is not None:
        what += ", admission"
    return shape, what


def _layers(playbook: Playbook) -> dict[str, int]:
    """Breadth-first depth from ``start``; steps no arc reaches go below, in declaration order."""
    names = [s.name for s in playbook.workflow]
    succ = {
        s.name: [a.step for a in (s.next.arcs if s.next else ()) if a.step in names]
        for s in playbook.workflow
    }
    depth: dict[str, int] = {}
    roots = (["start"] if "start" in names else names[:1]) + names
    for root in roots:
        if root in depth:
            continue
        depth[root] = max(depth.values(), default=-1) + 1 if depth else 0
        queue = deque([root])
        while queue:
            cur = queue.popleft()
            for nxt in succ[cur]:
                if nxt not in depth:
                    depth[nxt] = depth[cur] + 1
                    queue.append(nxt)
    return depth


LABEL_H = 13.0  # a label's line height in the drawing


def _separate_labels(edges: list[Edge]) -> None:
    """Move a label down, a line at a time, until it overlaps no label placed before it: two
    arcs between the same steps (exclusive arcs with different ``when``) or a fan-out's arcs
    meet at one midpoint, and their labels were drawn over each other."""
    placed: list[tuple[float, float, float, float]] = []
    for e in sorted((e for e in edges if e.label), key=lambda e: (e.ly, e.lx)):
        half = 3.2 * len(e.label)
        for _ in range(20):
            box = (e.lx - half, e.ly - LABEL_H, e.lx + half, e.ly)
            if not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3] for b in placed):
                break
            e.ly += LABEL_H
        placed.append((e.lx - half, e.ly - LABEL_H, e.lx + half, e.ly))


def _rows(playbook: Playbook, depth: dict[str, int]) -> dict[int, list[str]]:
    """The steps of each layer, ordered by one barycentre pass: a step sits under the steps that
    lead to it, so arcs cross as little as one pass can make them."""
    order = [s.name for s in playbook.workflow]
    rows: dict[int, list[str]] = {}
    for name in sorted(depth, key=lambda n: (depth[n], order.index(n))):
        rows.setdefault(depth[name], []).append(name)
    preds: dict[str, list[str]] = {n: [] for n in order}
    for s in playbook.workflow:
        for a in s.next.arcs if s.next else ():
            if a.step in preds and depth[s.name] < depth[a.step]:
                preds[a.step].append(s.name)
    pos: dict[str, float] = {}
    for d in sorted(rows):
        row = rows[d]
        keyed = [
            (sum(pos[p] for p in preds[n]) / len(preds[n]) if preds[n] else float(i), i, n)
            for i, n in enumerate(row)
        ]
        rows[d] = [n for _, _, n in sorted(keyed)]
        for i, n in enumerate(rows[d]):
            pos[n] = float(i)
    return rows


def _place(g: Graph, rows: dict[int, list[str]], steps: dict[str, Step], widest: int) -> dict[str, Node]:
    """A node per step, each row centred under the widest."""
    nodes: dict[str, Node] = {}
    for d, row in sorted(rows.items()):
        x0 = MARGIN + (widest - len(row)) * (NODE_W + GAP_X) / 2
        for i, name in enumerate(row):
            shape, what = _what(steps[name])
            desc = steps[name].desc
            title = f"{name}: {what}" + (f"\n{desc}" if desc else "")
            node = Node(name, x0 + i * (NODE_W + GAP_X), TOP + d * (NODE_H + GAP_Y), shape, what, title)
            nodes[name] = node
            g.nodes.append(node)
    return nodes


def _forward_edge(step: str, k: int, arc_step: str, src: Node, dst: Node, full: str, spread: float) -> Edge:
    """An arc down the layers: a curve from the bottom of ``src`` to the top of ``dst``, fanned out
    by ``spread`` so a step's arcs leave it apart."""
    x1, y1 = src.cx + spread, src.y + src.h
    x2, y2 = dst.cx, dst.y
    dy = max(24.0, (y2 - y1) / 2)
    svg = f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + dy:.1f} {x2:.1f},{y2 - dy:.1f} {x2:.1f},{y2 - 2:.1f}"
    return Edge(step, k, arc_step, svg, _short(full, MAX_LABEL), full, (x1 + x2) / 2, (y1 + y2) / 2)


def _back_edge(
    step: str, k: int, arc_step: str, src: Node, dst: Node, full: str, b: float
) -> tuple[Edge, float]:
    """An arc up the layers (a loop back) or to its own step: drawn out to the right by ``b``, so
    back arcs do not run over the nodes; with the rightmost x it reaches."""
    x1, y1 = src.x + src.w, src.y + src.h * (0.35 if src is not dst else 0.3)
    x2, y2 = dst.x + dst.w + 2, dst.y + dst.h * (0.65 if src is not dst else 0.7)
    xm = max(x1, x2) + b
    svg = f"M{x1:.1f},{y1:.1f} C{xm:.1f},{y1:.1f} {xm:.1f},{y2:.1f} {x2:.1f},{y2:.1f}"
    label = _short(full, MAX_LABEL)
    return Edge(step, k, arc_step, svg, label, full, max(x1, x2) + b * 0.75, (y1 + y2) / 2, back=True), xm


def layout(playbook: Playbook) -> Graph:
    steps = {s.name: s for s in playbook.workflow}
    depth = _layers(playbook)
    rows = _rows(playbook, depth)
    widest = max((len(r) for r in rows.values()), default=1)
    g = Graph()
    nodes = _place(g, rows, steps, widest)
    right = MARGIN + widest * (NODE_W + GAP_X) - GAP_X
    bulge = 0.0
    for s in playbook.workflow:
        arcs = s.next.arcs if s.next else ()
        forward = [k for k, a in enumerate(arcs) if a.step in steps and depth[a.step] > depth[s.name]]
        for k, arc in enumerate(arcs):
            src, dst = nodes[s.name], nodes.get(arc.step)
            if dst is None:  # validation refuses this; draw nothing rather than fail the page
                continue
            parts = [_inner(arc.when)] if arc.when else []
            if arc.args:
                parts.append("args: " + ", ".join(arc.args))
            full = " · ".join(parts)
            if k in forward:
                spread = (forward.index(k) - (len(forward) - 1) / 2) * 14.0
                edge = _forward_edge(s.name, k, arc.step, src, dst, full, spread)
            else:
                bulge += 22.0
                edge, xm = _back_edge(s.name, k, arc.step, src, dst, full, 36.0 + bulge)
                right = max(right, xm + 6.0 * len(edge.label) / 2 + 8)
            edge.inclusive = bool(s.next and s.next.mode == "inclusive")
            g.edges.append(edge)
    _separate_labels(g.edges)
    for e in g.edges:  # labels centred on their point; room for the widest on the right
        right = max(right, e.lx + 3.2 * len(e.label) + 8)
    first = nodes.get("start") or (g.nodes[0] if g.nodes else None)
    if first is not None:
        g.entry = (first.cx, first.y - 34)
    g.width = right + MARGIN
    g.height = TOP + (max(rows, default=0) + 1) * (NODE_H + GAP_Y) - GAP_Y + MARGIN
    return g
