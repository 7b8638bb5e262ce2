"""prometheus_client helpers shared by the server's and the worker's ``/metrics``.

Each process renders its own registry rather than prometheus_client's global one: tests run
several servers and workers in one process, and an embedding program's registry stays its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, disable_created_metrics, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from noetl.events.histogram import Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# No `<counter>_created` gauge beside every counter and histogram: a series per label set that
# no dashboard reads (Prometheus' own exposition does not have them either)
disable_created_metrics()  # type: ignore[no-untyped-call]


def process_registry() -> CollectorRegistry:
    """Process (CPU, memory, fds, start time), platform (``python_info``) and GC metrics."""
    reg = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=reg)
    PlatformCollector(registry=reg)
    GCCollector(registry=reg)
    return reg


def histogram_family(name: str, help_text: str, labels: list[str]) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, help_text, labels=labels)


def add_histogram(family: HistogramMetricFamily, values: list[str], h: Histogram) -> None:
    """One of our travelling histograms (``noetl.events.histogram``) as Prometheus samples."""
    buckets, cumulative = [], 0
    for bound, n in zip((*h.buckets, float("inf")), h.counts, strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), float(cumulative)))
    family.add_metric(values, buckets, h.sum)


def loop_restarts(restarts: dict[str, int]) -> CounterMetricFamily:
    fam = CounterMetricFamily(
        "noetl_loop_restarts", "Long-lived loops of this process ended and restarted.", labels=["loop"]
    )
    for name, n in sorted(restarts.items()):
        fam.add_metric([name], n)
    return fam


class Snapshot:
    """A collector over families computed for one scrape."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self.families = list(families)

    def collect(self) -> Iterator[Metric]:
        yield from self.families


class Exposition:
    """Several collectors rendered as one text (``generate_latest`` takes anything with ``collect``)."""

    def __init__(self, *collectors: Any) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for c in self.collectors:
            yield from c.collect()

    def text(self) -> str:
        return generate_latest(self).decode()
