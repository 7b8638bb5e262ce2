"""The HTTP API and console on the in-memory bus: the same routes as over NATS
(tests/service/test_api.py, test_console_http.py), with a server and worker on the twin, so the
API's reads, follows, probes and the runtime registry are shown to need nothing but the port."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from noetl.events.memory import MemoryBus
from noetl.events.runtime import RuntimeRegistrar, cancel_and_wait
from noetl.server.api import ApiServer
from noetl.server.api.launch import start_operations
from tests.playbooks import approval
from tests.support import until

TOKEN = "user-" + uuid.uuid4().hex
BEARER = {"Authorization": f"Bearer {TOKEN}"}

PRINTS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: prints, path: tests/memory_api/prints}
workload: {n: 3}
workflow:
  - step: start
    next: {arcs: [{step: talk, args: {x: "{{ workload.n }}"}}]}
  - step: talk
    tool:
      - name: say
        kind: python
        args: {x: "{{ args.x }}"}
        code: |
          def main(x):
              print("doubling", x)
              return x * 2
"""

APPROVAL = approval("tests/memory_api/approval")


@pytest.fixture
async def api(bus: MemoryBus, services: tuple[Any, Any]) -> AsyncIterator[ApiServer]:
    server, _worker = services
    api = ApiServer(
        bus, server.requests, server.catalog, server.credentials, host="127.0.0.1", port=0, token=TOKEN
    )
    await api.start()
    server.observer = api.collector.observe  # as start_operations wires them
    try:
        yield api
    finally:
        await api.stop()


async def sse(http: httpx.AsyncClient, path: str, **headers: str) -> list[dict[str, Any]]:
    """Every ``data:`` frame of an event stream, read until the server ends it."""
    out = []
    async with http.stream("GET", path, headers={"Accept": "text/event-stream", **headers}) as r:
        assert r.status_code == 200, f"{path}: {r.status_code}"
        assert r.headers["content-type"].startswith("text/event-stream"), r.headers["content-type"]
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


async def start(http: httpx.AsyncClient, text: str, payload: dict[str, Any] | None = None) -> str:
    r = await http.post("/api/executions", json={"playbook": text, "payload": payload or {}})
    assert r.status_code == 202, r.text
    return str(r.json()["execution_id"])


async def test_start_follow_and_read_an_execution(api: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=api.url, headers=BEARER, timeout=30) as http:
        eid = await start(http, PRINTS, {"n": 21})
        streamed = await sse(http, f"/api/executions/{eid}/events")  # replays, follows, ends
        names = [e["name"] for e in streamed]
        assert names[0] == "playbook.execution.requested", names
        assert names[-1] == "playbook.processed", names
        ids = [e["event_id"] for e in streamed]
        assert len(set(ids)) == len(ids), f"{len(ids) - len(set(ids))} repeated of {len(ids)} events"

        body = (await http.get(f"/api/executions/{eid}")).json()
        assert body["status"] == "success" and body["result"] == 42, body
        assert body["events"] == len(streamed), f"status counts {body['events']}, streamed {len(streamed)}"
        listed = (await http.get(f"/api/executions/{eid}/events")).json()
        assert [e["event_id"] for e in listed] == ids, f"listed {len(listed)}, streamed {len(ids)}"
        resumed = await sse(http, f"/api/executions/{eid}/events", **{"Last-Event-ID": ids[2]})
        assert [e["event_id"] for e in resumed] == ids[3:], f"resumed {len(resumed)}, want {len(ids) - 3}"

        logs = (await http.get(f"/api/executions/{eid}/logs")).json()["logs"]
        assert [e["step"] for e in logs] == ["talk"], logs
        assert "doubling 21" in logs[0]["output"], logs[0]["output"]
        page = (await http.get("/api/executions", params={"status": "success"})).json()
        assert eid in [e["execution_id"] for e in page["executions"]], page

        r = await http.get(f"/ui/executions/{eid}")
        assert r.status_code == 200, r.status_code
        assert "doubling 21" in r.text, r.text[-2000:]
        frames = await sse(http, f"/ui/executions/{eid}/events")
        assert [f["name"] for f in frames] == names, f"console streamed {len(frames)} of {len(names)} events"
        assert (await http.get("/ui/executions")).status_code == 200
        assert (await http.get(f"/ui/executions/{uuid.uuid4().hex}")).status_code == 404


async def test_a_signal_and_a_cancel_go_through(api: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=api.url, headers=BEARER, timeout=30) as http:

        async def waiting(eid: str) -> bool:
            body = (await http.get(f"/api/executions/{eid}")).json()
            return [w["signal"] for w in body.get("waiting") or []] == ["approval"]

        signalled, cancelled = await start(http, APPROVAL), await start(http, APPROVAL)
        await until(lambda: waiting(signalled), context="the execution never waited for its signal")
        r = await http.post(
            f"/api/executions/{signalled}/signals/approval", json={"data": {"approved": True}}
        )
        assert r.status_code == 202 and r.json()["signal"] == "sent", r.text
        names = [e["name"] for e in await sse(http, f"/api/executions/{signalled}/events")]
        assert "signal.received" in names and names[-1] == "playbook.processed", names
        body = (await http.get(f"/api/executions/{signalled}")).json()
        assert body["status"] == "success" and body["result"] == "shipped", body

        await until(lambda: waiting(cancelled), context="the second execution never waited")
        r = await http.post(f"/api/executions/{cancelled}/cancel", json={"reason": "test says stop"})
        assert r.status_code == 202 and r.json() == {"execution_id": cancelled, "cancel": "requested"}, r.text
        names = [e["name"] for e in await sse(http, f"/api/executions/{cancelled}/events")]
        assert "execution.cancel.requested" in names and names[-1] == "playbook.processed", names
        body = (await http.get(f"/api/executions/{cancelled}")).json()
        assert body["status"] == "cancelled", body
        r = await http.post(f"/api/executions/{uuid.uuid4().hex}/cancel", json={})
        assert r.status_code == 404, r.text


async def test_probes_metrics_and_runtime_on_the_port(
    bus: MemoryBus, services: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What is NATS itself (the NATS service, consumers' lag) is left out; the rest answers."""
    monkeypatch.delenv("NOETL_API_TOKEN", raising=False)
    server, worker = services
    s_ops = await start_operations(bus, "server", server, http_port=0, insecure=True)
    w_ops = await start_operations(bus, "worker", worker, heartbeat=0.2, ttl=2.0)
    try:
        assert s_ops.api is not None
        assert [type(p).__name__ for p in s_ops.parts] == ["ApiServer", "RuntimeRegistrar"], s_ops.parts
        async with httpx.AsyncClient(base_url=s_ops.api.url, timeout=30) as http:
            r = await http.get("/ready")
            assert r.status_code == 200 and r.json()["checks"].get("bus") is True, r.text
            assert r.json()["checks"]["partitions"] is True and r.json()["partitions_without_reader"] == []
            assert r.json()["partitions_owned"] == list(range(8)), r.text
            # a partition loop that ends (whatever the cause) is seen, said, and started again
            before = server.liveness()["loop_restarts"].get("partition 3", 0)
            await cancel_and_wait(server._loops[3])
            assert server.liveness()["partitions_without_reader"] == [3]

            async def restarted() -> bool:
                live = server.liveness()
                again = live["loop_restarts"].get("partition 3") == before + 1
                return again and not live["partitions_without_reader"]

            await until(restarted, context=f"partition 3 not restarted: {server.liveness()}")
            assert (await http.get("/ready")).status_code == 200
            eid = await start(http, PRINTS)
            await sse(http, f"/api/executions/{eid}/events")

            async def counted() -> str:
                text = (await http.get("/metrics")).text
                return text if 'noetl_executions{status="success"} 1' in text else ""

            text = await until(counted, context="the collector never folded the execution")
            assert 'noetl_stream_messages{stream="NOETL_EVENTS"}' in text, text
            assert "noetl_partitions_without_reader 0" in text, text
            assert 'noetl_loop_restarts_total{loop="partition 3"}' in text, text
            entries = (await http.get("/api/runtime")).json()
            roles = sorted(e["role"] for e in entries)
            assert roles == ["server", "worker"], entries
            assert (await http.get("/ui/workers")).status_code == 200
        reg = RuntimeRegistrar(bus, "worker", lambda: {"pool": "extra"}, interval=0.2, ttl=1.0)
        await reg.start()
        await reg.stop()
        assert reg.id not in {e["id"] for e in await _runtime(s_ops.api.url)}, (
            "a stopped registrar stays listed"
        )
    finally:
        await w_ops.stop()
        await s_ops.stop()


async def _runtime(url: str) -> list[dict[str, Any]]:
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        return list((await http.get("/api/runtime")).json())
