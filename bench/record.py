"""Collecting measurements: one value per metric per run, summarized as median, min and max.

A scenario adds one value per run (a run's own p50 or p99 is one value), so the table's spread
is the spread between runs, which is what tells whether a difference between two builds is real.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100): a value that was actually observed."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Metric:
    scenario: str
    name: str
    unit: str
    higher_is_better: bool = False
    values: list[float] = field(default_factory=list)
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "scenario": self.scenario,
            "metric": self.name,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "values": [round(v, 4) for v in self.values],
            "note": self.note,
        }
        if self.values:
            out.update(median=round(self.median, 4), min=min(self.values), max=max(self.values))
        return out


class Recorder:
    """Metrics in the order they were first added, plus free-text notes (why a peer is missing)."""

    def __init__(self) -> None:
        self.metrics: dict[tuple[str, str], Metric] = {}
        self.notes: list[tuple[str, str]] = []

    def add(
        self, scenario: str, name: str, value: float, unit: str, *, higher: bool = False, note: str = ""
    ) -> None:
        m = self.metrics.get((scenario, name))
        if m is None:
            m = self.metrics[(scenario, name)] = Metric(scenario, name, unit, higher, note=note)
        m.values.append(float(value))

    def note(self, scenario: str, text: str) -> None:
        self.notes.append((scenario, text))

    def median(self, scenario: str, name: str) -> float | None:
        m = self.metrics.get((scenario, name))
        return m.median if m and m.values else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "metrics": [m.to_dict() for m in self.metrics.values()],
            "notes": [{"scenario": s, "note": n} for s, n in self.notes],
        }
