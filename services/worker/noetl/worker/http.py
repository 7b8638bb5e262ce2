"""A worker's own HTTP port: ``/live``, ``/health``, ``/ready`` and ``/metrics``.

Why a worker needs one: without it a worker had no probes (Kubernetes could not tell a worker
stuck without NATS from a working one) and its numbers reached Prometheus only through the
server's scrape of the runtime heartbeats. The port is off unless asked for (``noetl worker
--http-port``, ``NOETL_WORKER_HTTP_PORT``); it serves no API and no playbook data, so it needs no
token.

- ``/live``: 200 while the process serves HTTP (restarting it would not bring NATS back);
- ``/health``: 200 while NATS is connected, else 503 naming the URL (no credentials) and the cause;
- ``/ready``: 200 when NATS is connected and the command loop runs;
- ``/metrics``: utilization (busy slots over ``--concurrency``), commands completed, task run
  durations, loop restarts and the process metrics, through prometheus_client.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from noetl.events import supervise
from noetl.host.http import AppServer

log = logging.getLogger("noetl.worker")


class WorkerCollector:
    """The worker's figures, read from the running ``Worker`` at scrape time (none before it runs)."""

    def __init__(self, http: WorkerHttp) -> None:
        self.http = http

    def collect(self) -> Iterator[Metric]:
        from noetl.host.prom import add_histogram, histogram_family, loop_restarts

        w = self.http.worker
        if w is None:
            return
        busy, slots = w.busy, max(int(w.concurrency), 1)
        labels = ["pool"]
        for name, help_text, value in (
            ("noetl_worker_slots", "Commands this worker runs at once at most (--concurrency).", slots),
            ("noetl_worker_busy_slots", "Commands this worker is running now.", busy),
            (
                "noetl_worker_utilization",
                "Busy slots over slots (0 to 1): scale the pool out near 1.",
                busy / slots,
            ),
        ):
            g = GaugeMetricFamily(name, help_text, labels=labels)
            g.add_metric([w.pool], value)
            yield g
        done = CounterMetricFamily(
            "noetl_worker_commands_completed", "Commands this worker finished (any outcome).", labels=labels
        )
        done.add_metric([w.pool], w.completed)
        yield done
        task = histogram_family(
            "noetl_worker_task_duration_seconds", "This worker's task run durations.", ["pool", "status"]
        )
        for status, h in sorted(w.task_durations.items()):
            add_histogram(task, [w.pool, status], h)
        yield task
        yield loop_restarts(dict(supervise.restarts))


def build_app(http: WorkerHttp, state: Any) -> Starlette:
    """The port opens before NATS is reached (the probes then say why nothing runs yet); the
    worker is attached once it has started."""
    from noetl.host.prom import CONTENT_TYPE, Exposition, process_registry

    process = process_registry()
    collector = WorkerCollector(http)

    def connected() -> bool:
        if http.worker is None:
            return state is None or bool(state.connected)
        nc = getattr(http.worker, "nc", None)
        return nc is None or bool(nc.is_connected)

    async def live(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def health(request: Request) -> Response:
        if connected():
            return JSONResponse({"status": "ok"})
        nats = state.to_dict() if state is not None else {}
        cause = f": {nats['last_error']}" if nats.get("last_error") else ""
        message = f"NATS at {nats.get('url', '?')} is not reachable{cause}"
        return JSONResponse({"status": "nats_unreachable", "message": message, "nats": nats}, status_code=503)

    async def ready(request: Request) -> Response:
        worker = http.worker
        loop = getattr(worker, "_loop_task", None)
        checks = {"nats": connected(), "commands": loop is not None and not loop.done()}
        ok = all(checks.values())
        body = {"status": "ready" if ok else "not_ready", "checks": checks, "pool": http.pool}
        return JSONResponse(body, status_code=200 if ok else 503)

    async def metrics(request: Request) -> Response:
        return Response(Exposition(collector, process).text(), media_type=CONTENT_TYPE)

    return Starlette(
        routes=[
            Route("/live", live, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/ready", ready, methods=["GET"]),
            Route("/metrics", metrics, methods=["GET"]),
        ]
    )


class WorkerHttp(AppServer):
    """The worker's port, open from before NATS is reached; ``attach`` the worker once started."""

    def __init__(
        self, worker: Any = None, state: Any = None, *, host: str = "127.0.0.1", port: int = 0, pool: str = ""
    ) -> None:
        """``worker``: the started ``Worker``, or None until ``attach``; ``state``: the NATS
        ``ConnectionState`` that ``/health`` reports while there is no worker yet."""
        self.worker = worker
        self.pool = getattr(worker, "pool", pool)
        super().__init__(build_app(self, state), host, port, "noetl-worker-http")

    def attach(self, worker: Any) -> None:
        self.worker, self.pool = worker, worker.pool

    async def start(self) -> None:
        await super().start()
        log.info("worker probes and metrics on %s", self.url)
