"""Draws docs/operations/trace.svg: the spans of one real execution (server and worker
in-process on the in-memory bus, spans kept by an in-memory exporter) as a waterfall.

    .venv/bin/python scripts/trace_picture.py
"""

from __future__ import annotations

import asyncio
import uuid
from html import escape
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from noetl.client.run import run_and_wait
from noetl.events import tracing
from noetl.events.memory import MemoryBus
from noetl.server.service import Server
from noetl.worker.service import Worker

OUT = Path(__file__).resolve().parents[1] / "docs" / "operations" / "trace.svg"
PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced, path: examples/traced}
workflow:
  - step: start
    next: {arcs: [{step: fetch}]}
  - step: fetch
    tool:
      - {name: load, kind: python, code: "def main():\\n    return [1, 2, 3]"}
      - {name: check, kind: noop}
    next: {arcs: [{step: report}]}
  - step: report
    tool: [{name: summarize, kind: python, code: "def main():\\n    return 'ok'"}]
"""
COLORS = {"execution": "#4c6ef5", "request": "#868e96", "decide": "#f59f00", "command": "#12b886",
          "task": "#15aabf", "tool": "#7950f2"}  # fmt: skip


async def spans() -> list[Any]:
    exporter = InMemorySpanExporter()
    tracing.configure(exporter, batch=False)
    bus = MemoryBus()
    server, worker = Server(bus), Worker(bus, concurrency=4)
    await server.start()
    await worker.start()
    try:
        out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK}, timeout=30)
        for _ in range(100):
            if any(s.name.startswith("execution ") for s in exporter.get_finished_spans()):
                break
            await asyncio.sleep(0.02)
    finally:
        await worker.stop(drain=False)
        await server.stop()
        tracing.shutdown()
    eid = out["execution_id"]
    return [s for s in exporter.get_finished_spans() if (s.attributes or {}).get("noetl.execution_id") == eid]


def svg(found: list[Any]) -> str:
    by_id = {s.context.span_id: s for s in found}
    children: dict[int | None, list[Any]] = {}
    for s in found:
        parent = s.parent.span_id if s.parent is not None and s.parent.span_id in by_id else None
        children.setdefault(parent, []).append(s)
    rows: list[tuple[int, Any]] = []

    def walk(parent: int | None, depth: int) -> None:
        for s in sorted(children.get(parent, []), key=lambda x: (x.start_time, x.name)):
            rows.append((depth, s))
            walk(s.context.span_id, depth + 1)

    walk(None, 0)
    t0 = min(s.start_time for s in found)
    t1 = max(s.end_time for s in found)
    span_ns = max(t1 - t0, 1)
    label_w, bar_w, row_h = 330, 560, 22
    height = 40 + row_h * len(rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{label_w + bar_w + 90}" height="{height}" '
        'font-family="monospace" font-size="12">',
        '<rect width="100%" height="100%" fill="white"/>',
        f'<text x="8" y="18" font-weight="bold">one execution, {len(rows)} spans, '
        f"{span_ns / 1e6:.1f} ms (trace {found[0].context.trace_id:032x})</text>",
    ]
    for i, (depth, s) in enumerate(rows):
        y = 30 + i * row_h
        kind = s.name.split(" ", 1)[0]
        x = label_w + bar_w * (s.start_time - t0) / span_ns
        w = max(bar_w * (s.end_time - s.start_time) / span_ns, 2)
        ms = (s.end_time - s.start_time) / 1e6
        out.append(f'<text x="{8 + depth * 14}" y="{y + 14}">{escape(s.name)}</text>')
        out.append(
            f'<rect x="{x:.1f}" y="{y + 3}" width="{w:.1f}" height="14" fill="{COLORS.get(kind, "#999")}"/>'
        )
        out.append(f'<text x="{x + w + 4:.1f}" y="{y + 14}" fill="#555">{ms:.2f} ms</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(svg(asyncio.run(spans())))
    print(OUT)


if __name__ == "__main__":
    main()
