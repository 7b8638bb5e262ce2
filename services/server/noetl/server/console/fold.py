"""The console's renderers over the read-side projection (``noetl.client.projection``): the time
line of step runs. The view and its fold are re-exported here for the console's modules."""

from __future__ import annotations

from dataclasses import dataclass

from noetl.client.projection import (
    ExecutionView,
    LoopProgress,
    StepRun,
    TaskRun,
    Wait,
    duration_ms,
    fold,
    format_ms,
    parse_ts,
)

__all__ = [
    "Bar",
    "ExecutionView",
    "LoopProgress",
    "StepRun",
    "TaskRun",
    "Timeline",
    "Wait",
    "duration_ms",
    "fold",
    "format_ms",
    "parse_ts",
    "timeline",
]


def _tick(ms: float, span: float) -> str:
    if not ms:
        return "0"
    return f"{ms:.1f} ms" if span < 20 else format_ms(ms)


@dataclass
class Bar:
    run: StepRun
    x: float
    w: float
    y: float


@dataclass
class Timeline:
    bars: list[Bar]
    width: float
    height: float
    ticks: list[tuple[float, str]]
    hidden: int  # runs past the drawing limit (all are still listed below the chart)


def timeline(
    view: ExecutionView, *, width: float = 900.0, label_w: float = 180.0, limit: int = 200
) -> Timeline:
    """Step runs as bars on one time axis from the request to the end (or the latest event)."""
    row_h, top = 20.0, 22.0
    end = view.finished_at or view.last_at
    span = max(duration_ms(view.requested_at, end) or 0.0, 1.0)
    scale = (width - label_w - 12) / span
    bars = []
    for i, run in enumerate(view.runs[:limit]):
        start = duration_ms(view.requested_at, run.started) or 0.0
        stop = duration_ms(view.requested_at, run.ended or end) or start
        bars.append(Bar(run, label_w + start * scale, max((stop - start) * scale, 3.0), top + i * row_h))
    ticks = [(label_w + f * span * scale, _tick(f * span, span)) for f in (0, 0.25, 0.5, 0.75, 1)]
    return Timeline(bars, width, top + len(bars) * row_h + 6, ticks, max(len(view.runs) - limit, 0))
