"""The server's metrics, exposed through ``prometheus_client`` (text format 0.0.4).

Why prometheus_client and not text written by hand: its exposition is the one every scraper
parses (escaping, ``_total``, ``+Inf``), and it brings the standard process metrics
(``process_cpu_seconds_total``, ``process_resident_memory_bytes``, open fds, GC, ``python_info``).
Each ``Metrics`` has a registry of its own, not the global one: tests run several servers in one
process, and a server embedded in another program must not add to that program's registry.

Where each number comes from:
- executions by status: folded from the event log (``playbook.execution.requested`` and
  ``workflow.finished`` from the start of the stream), so every replica knows the same totals;
- step durations: a histogram of the step runs this process decided on, from ``step.scheduled``
  to the run's terminal event (schedule to close), from its start;
- task durations: each worker's own histogram, sent with its runtime heartbeat and exposed with a
  ``worker`` label, so a worker that stops leaves its series behind rather than lowering a sum;
- queue depth and consumer lag: read from JetStream at scrape time, never kept;
- HTTP requests: a counter and a latency histogram per method, endpoint and code.

**Cluster-wide figures are exported once.** Executions by status, stream sizes, consumer lag,
live processes and stalled executions are the same whichever replica answers; with the chart's
two replicas ``sum()`` counted them twice. Only the replica holding the lease of partition 0
(the leases replicas already split the event log with) exports them, and
``noetl_cluster_metrics_exporter`` says which one does (1) and which do not (0). A lease rather
than a ``replica`` label: with a label every query would need ``max by`` instead of ``sum``, and
a dashboard written with ``sum`` would still be wrong. While partition 0 moves to another replica
(within ``NOETL_LEASE_TTL``) the figures may be absent for a scrape or two; alerts use ``for:``.
A process without partition leases (the in-memory twin, an API alone) exports them always.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram as PromHistogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from noetl.events.histogram import Histogram
from noetl.host.prom import (
    CONTENT_TYPE,
    Exposition,
    Snapshot,
    add_histogram,
    histogram_family,
    loop_restarts,
    process_registry,
)

HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The numbers this process keeps; the collector and the HTTP layer write, ``/metrics`` reads."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.finished: Counter[str] = Counter()
        self.step_durations: dict[str, Histogram] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.http_requests = PromCounter(
            "noetl_http_requests",
            "HTTP requests served by this process.",
            ["code", "endpoint", "method"],
            registry=self.registry,
        )
        self.http_latency = PromHistogram(
            "noetl_http_request_duration_seconds",
            "HTTP request latency (first byte in to last byte out), by method, endpoint and code.",
            ["code", "endpoint", "method"],
            buckets=HTTP_BUCKETS,
            registry=self.registry,
        )
        self.process = process_registry()

    def execution_requested(self, execution_id: str) -> None:
        self.running.add(execution_id)

    def execution_finished(self, execution_id: str, status: str) -> None:
        self.running.discard(execution_id)
        self.finished[status] += 1

    def observe_step(self, status: str, seconds: float) -> None:
        self.step_durations.setdefault(status, Histogram()).observe(max(seconds, 0.0))

    def observe_http(self, method: str, endpoint: str, code: int, seconds: float) -> None:
        labels = (str(code), endpoint, method)
        self.http_requests.labels(*labels).inc()
        self.http_latency.labels(*labels).observe(max(seconds, 0.0))

    def families(self, live: dict[str, Any]) -> list[Metric]:
        """This scrape's families from ``live`` (see ``ops.read_live``) and the numbers kept here."""
        out: list[Metric] = []
        server = live.get("server")
        cluster = server is None or 0 in server.get("partitions_owned", [])
        g = GaugeMetricFamily(
            "noetl_cluster_metrics_exporter",
            "1 on the one replica that exports the cluster-wide figures (it holds partition 0's lease).",
            value=1 if cluster else 0,
        )
        out.append(g)
        if cluster:
            out += self._cluster(live)
        step = histogram_family(
            "noetl_step_duration_seconds", "Step run durations (scheduled to terminal event).", ["status"]
        )
        for status, h in sorted(self.step_durations.items()):
            add_histogram(step, [status], h)
        out.append(step)
        if server is not None:
            out.append(
                GaugeMetricFamily(
                    "noetl_partitions_owned",
                    "Partitions this server replica holds a lease for.",
                    value=len(server["partitions_owned"]),
                )
            )
            out.append(
                GaugeMetricFamily(
                    "noetl_partitions_without_reader",
                    "Partitions this replica holds with no live reader (nothing decides for them).",
                    value=len(server["partitions_without_reader"]),
                )
            )
            out.append(
                CounterMetricFamily(
                    "noetl_reader_restarts",
                    "Partition readers lost and opened again.",
                    value=server["reader_restarts"],
                )
            )
        out.append(loop_restarts(live.get("loop_restarts", {})))
        return out

    def _cluster(self, live: dict[str, Any]) -> list[Metric]:
        out: list[Metric] = []
        ex = GaugeMetricFamily(
            "noetl_executions", "Executions in the event log by status (running or final).", labels=["status"]
        )
        ex.add_metric(["running"], len(self.running))
        for status, n in sorted(self.finished.items()):
            ex.add_metric([status], n)
        out.append(ex)
        task = histogram_family(
            "noetl_task_duration_seconds", "Task run durations, per live worker.", ["status", "worker"]
        )
        for worker, status, h in sorted(live.get("task_durations", []), key=lambda x: (x[0], x[1])):
            add_histogram(task, [status, worker], h)
        out.append(task)
        out.append(
            GaugeMetricFamily(
                "noetl_commands_in_flight",
                "Commands stored in NOETL_COMMANDS, not yet acked.",
                value=live.get("commands_in_flight", 0),
            )
        )
        streams = GaugeMetricFamily("noetl_stream_messages", "Messages stored per stream.", labels=["stream"])
        for stream, n in sorted(live.get("streams", {}).items()):
            streams.add_metric([stream], n)
        out.append(streams)
        sizes = GaugeMetricFamily("noetl_stream_bytes", "Bytes stored per stream.", labels=["stream"])
        for stream, n in sorted(live.get("stream_bytes", {}).items()):
            sizes.add_metric([stream], n)
        out.append(sizes)
        for metric, help_text in (
            ("pending", "Messages a durable consumer has not been delivered yet (its lag)."),
            ("ack_pending", "Messages delivered to a durable consumer and not acked yet."),
            ("redelivered", "Messages a durable consumer is redelivering."),
        ):
            fam = GaugeMetricFamily(f"noetl_consumer_{metric}", help_text, labels=["consumer", "stream"])
            for c in live.get("consumers", []):
                fam.add_metric([c["consumer"], c["stream"]], c[metric])
            out.append(fam)
        rt = GaugeMetricFamily(
            "noetl_runtime_processes", "Live servers and workers in noetl_runtime.", labels=["role"]
        )
        for role, n in sorted(live.get("runtime", {}).items()):
            rt.add_metric([role], n)
        out.append(rt)
        stalled = GaugeMetricFamily(
            "noetl_executions_stalled",
            "Running executions with no event for NOETL_STALL_AFTER_S that wait for nothing declared "
            "(state=stalled), or for a pool without a live worker (state=queued).",
            labels=["state"],
        )
        for state in ("stalled", "queued"):
            stalled.add_metric([state], live.get("stalled", {}).get(state, 0))
        out.append(stalled)
        return out

    def render(self, live: dict[str, Any]) -> str:
        """The whole exposition for one scrape: this scrape's families, HTTP, process."""
        return Exposition(Snapshot(self.families(live)), self.registry, self.process).text()


__all__ = ["CONTENT_TYPE", "Metrics"]
