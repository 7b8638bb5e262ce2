"""/metrics of the server and of a worker's own port, parsed by prometheus_client (issue 30)."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from noetl.client.run import run_and_wait
from noetl.events.connection import ConnectionState
from noetl.events.nats_port import NatsBus
from noetl.server.api import ApiServer
from noetl.server.api.metrics import Metrics
from noetl.worker.http import WorkerHttp
from tests.support import running, until

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: m, path: tests/metrics}
workflow:
  - step: start
    tool: [{name: t, kind: python, code: "def main():\\n    return 1"}]
"""


def parsed(text: str) -> dict[str, Any]:
    """Every family by name; the parser raises on anything that is not valid exposition text."""
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample: str, **labels: str) -> float | None:
    for fam in families.values():
        for s in fam.samples:
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


async def test_server_and_worker_metrics_parse(nc: Any) -> None:
    async with running(NatsBus(nc)) as (server, worker):
        api = ApiServer(
            server.bus, server.requests, server.catalog, server.credentials, host="127.0.0.1", port=0
        )
        await api.start()
        api.ctx.liveness = server.liveness
        server.observer = api.collector.observe
        probes = WorkerHttp(None, ConnectionState("nats://127.0.0.1"), port=0, pool=worker.pool)
        await probes.start()
        try:
            async with httpx.AsyncClient(timeout=10) as http:
                # before the worker is attached: alive, not ready, process metrics only
                assert (await http.get(f"{probes.url}/live")).status_code == 200
                assert (await http.get(f"{probes.url}/ready")).status_code == 503
                assert "process_cpu_seconds" in parsed((await http.get(f"{probes.url}/metrics")).text)
                probes.attach(worker)
                out = await run_and_wait(
                    NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK}, timeout=30
                )
                assert out["status"] == "success"
                assert (await http.get(f"{api.url}/health")).status_code == 200

                async def server_families() -> dict[str, Any] | None:
                    fams = parsed((await http.get(f"{api.url}/metrics")).text)
                    done = value(fams, "noetl_executions", status="success")
                    return fams if done and done >= 1 else None

                fams = await until(server_families, 15)
                assert value(fams, "noetl_cluster_metrics_exporter") == 1.0  # it holds partition 0
                assert fams["noetl_step_duration_seconds"].type == "histogram"
                assert value(fams, "noetl_step_duration_seconds_count", status="done") >= 1
                assert value(fams, "noetl_stream_messages", stream="NOETL_TIMERS") is not None
                assert value(fams, "noetl_stream_bytes", stream="NOETL_EVENTS") > 0
                assert value(fams, "noetl_consumer_pending", stream="NOETL_COMMANDS") is not None
                assert fams["noetl_http_request_duration_seconds"].type == "histogram"
                assert (
                    value(fams, "noetl_http_request_duration_seconds_count", endpoint="health", code="200")
                    >= 1
                )
                assert value(fams, "noetl_http_requests_total", endpoint="health") >= 1
                assert value(fams, "process_resident_memory_bytes") > 0
                assert "noetl_partitions_owned" in fams and "noetl_loop_restarts" in fams

                r = await http.get(f"{probes.url}/ready")
                assert r.status_code == 200 and r.json()["checks"] == {"nats": True, "commands": True}
                assert (await http.get(f"{probes.url}/health")).status_code == 200
                wf = parsed((await http.get(f"{probes.url}/metrics")).text)
                assert value(wf, "noetl_worker_slots", pool="default") == worker.concurrency
                assert value(wf, "noetl_worker_utilization", pool="default") is not None
                assert value(wf, "noetl_worker_commands_completed_total", pool="default") >= 1
                assert value(wf, "noetl_worker_task_duration_seconds_count", pool="default", status="ok") >= 1
                assert value(wf, "process_open_fds") is not None
        finally:
            await probes.stop()
            await api.stop()


def test_only_the_holder_of_partition_0_exports_the_cluster_figures() -> None:
    """Two replicas, one scrape each: ``sum()`` over both counts every execution once."""
    m = Metrics()
    m.execution_requested("e1")
    m.execution_finished("e1", "success")
    live = {"streams": {"NOETL_EVENTS": 5}, "consumers": []}
    holder = parsed(m.render({**live, "server": _server([0, 1, 2, 3])}))
    other = parsed(m.render({**live, "server": _server([4, 5, 6, 7])}))
    assert value(holder, "noetl_executions", status="success") == 1
    assert value(other, "noetl_executions", status="success") is None
    assert value(other, "noetl_stream_messages", stream="NOETL_EVENTS") is None
    assert (
        value(holder, "noetl_cluster_metrics_exporter") == 1
        and value(other, "noetl_cluster_metrics_exporter") == 0
    )
    assert value(other, "noetl_partitions_owned") == 4  # its own figures it exports always


def _server(owned: list[int]) -> dict[str, Any]:
    return {"partitions_owned": owned, "partitions_without_reader": [], "reader_restarts": 0}
