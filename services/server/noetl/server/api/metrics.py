"""A small metrics registry and its Prometheus text exposition (format 0.0.4), written by hand.

Four kinds of numbers, each from where it is true:
- executions by status: folded from the event log (``playbook.execution.requested`` and
  ``workflow.finished`` from the start of the stream), so every replica reports the same totals;
- step durations: a histogram of the step runs this process decided on, from ``step.scheduled``
  to the run's terminal event (schedule to close), from its start (the usual Prometheus counter
  semantics: they restart at zero with the process);
- task durations: each worker's own histogram, sent with its runtime heartbeat and exposed with a
  ``worker`` label, so a worker that stops leaves its series behind rather than lowering a sum;
- queue depth and consumer lag: read from JetStream at scrape time (``stream_info`` /
  ``consumers_info``), never kept.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from noetl.events.histogram import Histogram


def _labels(labels: dict[str, Any]) -> str:
    if not labels:
        return ""

    def esc(v: Any) -> str:
        return str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}"


class Exposition:
    """Collects families in order; each family's HELP and TYPE lines come once, before its samples."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]

    def sample(self, name: str, value: float, **labels: Any) -> None:
        v = int(value) if float(value).is_integer() else value
        self.lines.append(f"{name}{_labels(labels)} {v}")

    def histogram(self, name: str, h: Histogram, **labels: Any) -> None:
        cumulative = 0
        for bound, n in zip((*h.buckets, "+Inf"), h.counts, strict=True):
            cumulative += n
            self.sample(f"{name}_bucket", cumulative, **labels, le=bound)
        self.sample(f"{name}_sum", h.sum, **labels)
        self.sample(f"{name}_count", h.count, **labels)

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


class Metrics:
    """The numbers this process keeps; the collector and the HTTP layer write, ``/metrics`` reads."""

    def __init__(self) -> None:
        self.running: set[str] = set()
        self.finished: Counter[str] = Counter()
        self.step_durations: dict[str, Histogram] = {}
        self.http_requests: Counter[tuple[str, str, int]] = Counter()

    def execution_requested(self, execution_id: str) -> None:
        self.running.add(execution_id)

    def execution_finished(self, execution_id: str, status: str) -> None:
        self.running.discard(execution_id)
        self.finished[status] += 1

    def observe_step(self, status: str, seconds: float) -> None:
        self.step_durations.setdefault(status, Histogram()).observe(max(seconds, 0.0))

    def observe_http(self, method: str, endpoint: str, code: int, seconds: float) -> None:
        self.http_requests[(method, endpoint, code)] += 1

    def render(self, live: dict[str, Any]) -> str:
        """``live`` holds what was read from JetStream for this scrape (see ``ops.read_live``)."""
        out = Exposition()
        out.family("noetl_executions", "gauge", "Executions in the event log by status (running or final).")
        out.sample("noetl_executions", len(self.running), status="running")
        for status, n in sorted(self.finished.items()):
            out.sample("noetl_executions", n, status=status)
        out.family(
            "noetl_step_duration_seconds", "histogram", "Step run durations (scheduled to terminal event)."
        )
        for status, h in sorted(self.step_durations.items()):
            out.histogram("noetl_step_duration_seconds", h, status=status)
        out.family("noetl_task_duration_seconds", "histogram", "Task run durations, per live worker.")
        for worker, status, h in sorted(live.get("task_durations", []), key=lambda x: (x[0], x[1])):
            out.histogram("noetl_task_duration_seconds", h, status=status, worker=worker)
        out.family("noetl_commands_in_flight", "gauge", "Commands stored in NOETL_COMMANDS, not yet acked.")
        out.sample("noetl_commands_in_flight", live.get("commands_in_flight", 0))
        out.family("noetl_stream_messages", "gauge", "Messages stored per stream.")
        for stream, n in sorted(live.get("streams", {}).items()):
            out.sample("noetl_stream_messages", n, stream=stream)
        for metric, help_text in (
            ("pending", "Messages a durable consumer has not been delivered yet (its lag)."),
            ("ack_pending", "Messages delivered to a durable consumer and not acked yet."),
            ("redelivered", "Messages a durable consumer is redelivering."),
        ):
            name = f"noetl_consumer_{metric}"
            out.family(name, "gauge", help_text)
            for c in live.get("consumers", []):
                out.sample(name, c[metric], stream=c["stream"], consumer=c["consumer"])
        out.family("noetl_runtime_processes", "gauge", "Live servers and workers in noetl_runtime.")
        for role, n in sorted(live.get("runtime", {}).items()):
            out.sample("noetl_runtime_processes", n, role=role)
        out.family(
            "noetl_executions_stalled",
            "gauge",
            "Running executions with no event for NOETL_STALL_AFTER_S that wait for nothing declared "
            "(state=stalled), or for a pool without a live worker (state=queued).",
        )
        for state in ("stalled", "queued"):
            out.sample("noetl_executions_stalled", live.get("stalled", {}).get(state, 0), state=state)
        server = live.get("server")
        if server is not None:
            out.family("noetl_partitions_owned", "gauge", "Partitions this server replica holds a lease for.")
            out.sample("noetl_partitions_owned", len(server["partitions_owned"]))
            out.family(
                "noetl_partitions_without_reader",
                "gauge",
                "Partitions this replica holds with no live reader (nothing decides for them).",
            )
            out.sample("noetl_partitions_without_reader", len(server["partitions_without_reader"]))
            out.family("noetl_reader_restarts_total", "counter", "Partition readers lost and opened again.")
            out.sample("noetl_reader_restarts_total", server["reader_restarts"])
        out.family(
            "noetl_loop_restarts_total", "counter", "Long-lived loops of this process ended and restarted."
        )
        for loop_name, n in sorted(live.get("loop_restarts", {}).items()):
            out.sample("noetl_loop_restarts_total", n, loop=loop_name)
        out.family("noetl_http_requests_total", "counter", "HTTP requests served by this process.")
        for (method, endpoint, code), n in sorted(self.http_requests.items()):
            out.sample("noetl_http_requests_total", n, method=method, endpoint=endpoint, code=code)
        return out.text()
