"""Probes, metrics, the runtime registry and the OpenAPI document.

``/live`` answers 200 as long as the process serves HTTP (the liveness probe: it must not fail
because NATS is away, restarting the server would not bring NATS back); ``/health`` says whether
the process can work, 503 naming the NATS URL (no credentials) and the last connect error while
NATS is unreachable; ``/ready`` answers 200 only when NATS is connected, the streams exist and
every partition this server holds has a live reader, so a load balancer sends no request that
would fail and a replica that decides nothing says so.

On a bus with no NATS connection under it (the in-memory twin) the probes and metrics say what
the port can answer: the streams (``Bus.count``) and the runtime bucket, not consumers' lag.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.schemas import SchemaGenerator

from noetl.events import subjects as s
from noetl.events import supervise
from noetl.events.histogram import Histogram
from noetl.events.runtime import list_runtime
from noetl.server.api.context import ctx_of
from noetl.server.api.listener import nats_status
from noetl.server.api.metrics import CONTENT_TYPE
from noetl.server.api.queries import stall_counts
from noetl.store.audit import AUDIT_STREAM

STREAMS = (s.EVENTS_STREAM, s.COMMANDS_STREAM, s.REQUESTS_STREAM, s.TIMERS_STREAM, AUDIT_STREAM)
PROBE_TIMEOUT = 2.0

schemas = SchemaGenerator(
    {
        "openapi": "3.0.3",
        "info": {"title": "NoETL API", "version": "1"},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
)


async def live(request: Request) -> Response:
    """
    ---
    summary: Liveness (the process is up and serves HTTP, whatever NATS does)
    security: []
    responses:
      200: {description: "{status: ok}"}
    """
    return JSONResponse({"status": "ok"})


async def health(request: Request) -> Response:
    """
    ---
    summary: Health (the process is up and NATS is connected)
    security: []
    responses:
      200: {description: "{status: ok}"}
      503: {description: "{status: nats_unreachable, message, nats: {url, connected, last_error, ...}}"}
    """
    ctx = ctx_of(request)
    if _connected(ctx.nc):
        return JSONResponse({"status": "ok"})
    nats = nats_status(ctx.nats_state, ctx.nc) or {}
    cause = f": {nats['last_error']}" if nats.get("last_error") else ""
    return JSONResponse(
        {
            "status": "nats_unreachable",
            "message": f"NATS at {nats.get('url', '?')} is not reachable{cause}",
            "nats": nats,
        },
        status_code=503,
    )


async def ready(request: Request) -> Response:
    """
    ---
    summary: Readiness (NATS connected, streams present, every owned partition read)
    security: []
    responses:
      200: {description: ready}
      503: {description: "not ready, with the reason"}
    """
    ctx = ctx_of(request)
    connected = _connected(ctx.nc)
    checks: dict[str, Any] = {"nats": connected} if ctx.nc is not None else {"bus": connected}
    if connected:
        for name in STREAMS:
            try:
                await asyncio.wait_for(ctx.bus.count(name), PROBE_TIMEOUT)
                checks[name] = True
            except Exception:
                checks[name] = False
    ok = all(checks.values()) and len(checks) == 1 + len(STREAMS)
    body: dict[str, Any] = {"status": "ready" if ok else "not_ready", "checks": checks}
    if not connected:
        body["nats"] = nats_status(ctx.nats_state, ctx.nc)
    if ctx.liveness is not None:
        # a server that holds a partition and reads nothing for it decides nothing: not ready
        live = ctx.liveness()
        checks["partitions"] = not live["partitions_without_reader"]
        body["partitions_owned"] = live["partitions_owned"]
        body["partitions_without_reader"] = live["partitions_without_reader"]
        ok = ok and checks["partitions"]
        body["status"] = "ready" if ok else "not_ready"
    return JSONResponse(body, status_code=200 if ok else 503)


def _connected(nc: Any) -> bool:
    """NATS connected; always true without NATS (the in-memory twin is never away)."""
    return nc is None or bool(nc.is_connected)


async def read_live(bus: Any) -> dict[str, Any]:
    """Queue depths and durable consumer lag, read from JetStream for one scrape; consumers only
    where the bus has JetStream under it (``bus.js``): the port has no notion of a consumer's lag."""
    live: dict[str, Any] = {"streams": {}, "stream_bytes": {}, "consumers": []}
    js = getattr(bus, "js", None)
    for name in STREAMS:
        with contextlib.suppress(Exception):
            if js is not None:  # one request gives both figures
                state = (await js.stream_info(name)).state
                messages = state.messages
                live["stream_bytes"][name] = state.bytes
            else:
                messages = await bus.count(name)
            live["streams"][name] = messages
            if name == s.COMMANDS_STREAM:
                live["commands_in_flight"] = messages
        if name == AUDIT_STREAM or js is None:
            continue
        with contextlib.suppress(Exception):
            for c in await js.consumers_info(name):
                if not c.config.durable_name:  # ordered and one-off read consumers come and go
                    continue
                live["consumers"].append(
                    {
                        "stream": name,
                        "consumer": c.name,
                        "pending": c.num_pending or 0,
                        "ack_pending": c.num_ack_pending or 0,
                        "redelivered": c.num_redelivered or 0,
                    }
                )
    with contextlib.suppress(Exception):
        entries = await list_runtime(bus)
        live["runtime"] = dict(Counter(str(e.get("role")) for e in entries))
        live["task_durations"] = _task_durations(entries)
    return live


def _task_durations(entries: list[dict[str, Any]]) -> list[tuple[str, str, Histogram]]:
    """(worker id, status, histogram) from the live workers' heartbeats; a malformed one is skipped."""
    out = []
    for e in entries:
        for status, d in (e.get("task_durations") or {}).items():
            with contextlib.suppress(KeyError, TypeError, ValueError):
                out.append((str(e.get("id")), str(status), Histogram.from_dict(d)))
    return out


async def metrics(request: Request) -> Response:
    """
    ---
    summary: Prometheus metrics (text exposition 0.0.4, through prometheus_client)
    security: []
    responses:
      200: {description: metrics, content: {text/plain: {}}}
    """
    ctx = ctx_of(request)
    server = ctx.liveness() if ctx.liveness is not None else None
    # the cluster-wide figures cost JetStream requests: only the replica exporting them reads them
    cluster = server is None or 0 in server.get("partitions_owned", [])
    live = await read_live(ctx.bus) if cluster and _connected(ctx.nc) else {}
    if cluster and _connected(ctx.nc):
        with contextlib.suppress(Exception):
            live["stalled"] = await stall_counts(ctx.bus, sorted(ctx.metrics.running))
    if server is not None:
        live["server"] = server
    live["loop_restarts"] = dict(supervise.restarts)
    return Response(ctx.metrics.render(live), media_type=CONTENT_TYPE)


async def runtime(request: Request) -> Response:
    """
    ---
    summary: Live servers and workers (entries in the noetl_runtime KV bucket)
    parameters:
      - {name: role, in: query, schema: {type: string, enum: [server, worker]}}
    responses:
      200: {description: "[{role, id, pool, concurrency, running, version, started_at, host}]"}
    """
    return JSONResponse(await list_runtime(ctx_of(request).bus, request.query_params.get("role")))


async def openapi(request: Request) -> Response:
    return JSONResponse(schemas.get_schema(routes=request.app.routes))


routes = [
    Route("/health", health, methods=["GET"]),
    Route("/live", live, methods=["GET"]),
    Route("/ready", ready, methods=["GET"]),
    Route("/metrics", metrics, methods=["GET"]),
    Route("/api/runtime", runtime, methods=["GET"]),
    Route("/openapi.json", openapi, methods=["GET"], include_in_schema=False),
]
