"""A Prometheus-style histogram that travels: workers keep one per task status and send it in their
runtime heartbeat, and the server's ``/metrics`` exposes it, so no event is read twice for it."""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    def __init__(self, buckets: Iterable[float] = DURATION_BUCKETS) -> None:
        self.buckets = tuple(buckets)
        self.counts = [0] * (len(self.buckets) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def to_dict(self) -> dict[str, Any]:
        return {"buckets": list(self.buckets), "counts": list(self.counts), "sum": self.sum}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Histogram:
        """Raises ValueError on a malformed entry (another version's, a hand-written one)."""
        h = cls(float(b) for b in d["buckets"])
        counts = [int(c) for c in d["counts"]]
        if len(counts) != len(h.counts):
            raise ValueError("histogram counts do not match its buckets")
        h.counts, h.sum = counts, float(d["sum"])
        return h
