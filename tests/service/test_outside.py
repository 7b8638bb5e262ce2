"""Time limits, signals, approvals and pause against a real server, worker and nats-server
(SEMANTICS §16, §17), through each of the three interfaces: the CLI, HTTP and the NATS service."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from noetl.client.run import finished_event, pause, resume, submit
from noetl.events.bus import read_execution_events
from noetl.events.nats_port import NatsBus
from noetl.server.api import ApiServer, NatsApiService
from noetl.server.api.queries import execution_status
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker
from tests.playbooks import approval
from tests.support import until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "user-" + uuid.uuid4().hex

APPROVAL = approval("tests/outside/approval")

TIMEOUT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: timeout, path: tests/outside/timeout}
workflow:
  - step: start
    spec: {policy: {lifecycle: {timeout_s: 1}}}
    tool:
      - name: hang
        kind: python
        code: |
          import time
          def main():
              time.sleep(30)
              return "too late"
    next:
      arcs:
        - {step: late, when: "{{ event.name == 'step.failed' and event.error.kind == 'step_timeout' }}"}
  - step: late
    tool: {kind: noop, result: "routed"}
"""

EXECUTION_LIMIT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: limit, path: tests/outside/limit}
executor: {spec: {policy: {defaults: {timeouts: {execution_s: 1}}}}}
workflow:
  - step: start
    tool:
      - name: hang
        kind: python
        code: |
          import time
          def main():
              time.sleep(30)
"""

PAUSE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pause, path: tests/outside/pause}
workflow:
  - step: start
    tool:
      - name: work
        kind: python
        code: |
          import time
          def main():
              time.sleep(1.0)
              return 1
    next: {arcs: [{step: after}]}
  - step: after
    tool: {kind: noop, result: after}
"""


@pytest.fixture
async def stack(nc, nats_server) -> AsyncIterator[dict[str, Any]]:
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    server, worker = (
        Server(NatsBus(nc), credentials=creds),
        Worker(NatsBus(nc), concurrency=4, credentials=creds),
    )
    await server.start()
    await worker.start()
    api = ApiServer(server.bus, server.requests, server.catalog, creds, host="127.0.0.1", port=0, token=TOKEN)
    await api.start()
    micro = NatsApiService(nc, server.requests)
    await micro.start()
    user = await nats.connect(nats_server.url)
    async with httpx.AsyncClient(
        base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    ) as http:
        try:
            yield {"http": http, "nc": nc, "user": user, "url": nats_server.url}
        finally:
            await user.close()
            await micro.stop()
            await api.stop()
            await worker.stop(drain=False)
            await server.stop()


async def start(nc: Any, text: str) -> str:
    return await submit(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": text, "payload": {}})


async def finished(nc: Any, eid: str) -> dict[str, Any]:
    ev = await until(lambda: finished_event(NatsBus(nc), eid))
    return dict(ev["payload"])


async def waiting(nc: Any, eid: str) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        out = await execution_status(NatsBus(nc), eid)
        return out if out and out.get("waiting") else None

    return dict(await until(check))


async def test_approval_signalled_through_each_interface(stack) -> None:
    nc, http, user = stack["nc"], stack["http"], stack["user"]
    by_http, by_nats, by_cli = [await start(nc, APPROVAL) for _ in range(3)]
    for eid in (by_http, by_nats, by_cli):
        st = await waiting(nc, eid)
        assert st["status"] == "running" and st["waiting"][0]["signal"] == "approval"
        assert st["waiting"][0]["step"] == "approve"

    r = await http.post(f"/api/executions/{by_http}/signals/approval", json={"data": {"approved": True}})
    assert r.status_code == 202, r.text
    msg = await user.request(
        "noetl.api.signal",
        json.dumps({"execution_id": by_nats, "signal": "approval", "data": {"approved": False}}).encode(),
        timeout=10,
    )
    assert json.loads(msg.data)["signal"] == "sent"
    cli = await asyncio.to_thread(
        subprocess.run,
        [
            sys.executable,
            "-m",
            "noetl.cli.main",
            "signal",
            by_cli,
            "approval",
            "--data",
            '{"approved": true}',
            "--nats-url",
            stack["url"],
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr

    assert (await finished(nc, by_http))["result"] == "shipped"
    assert (await finished(nc, by_nats))["result"] == "rejected"
    assert (await finished(nc, by_cli))["result"] == "shipped"
    names = [e["name"] for e in await read_execution_events(NatsBus(nc), by_http)]
    assert "step.waiting" in names and "signal.received" in names

    # a finished execution refuses signals: 409 over HTTP, execution_finished on NATS, exit 2 in the CLI
    r = await http.post(f"/api/executions/{by_http}/signals/approval", json={"data": {}})
    assert r.status_code == 409 and r.json()["error"]["kind"] == "execution_finished"
    msg = await user.request(
        "noetl.api.signal", json.dumps({"execution_id": by_nats, "signal": "approval"}).encode(), timeout=10
    )
    assert json.loads(msg.data)["error"]["kind"] == "execution_finished"
    r = await http.post(f"/api/executions/{'0' * 32}/signals/approval", json={})
    assert r.status_code == 404
    r = await http.post(f"/api/executions/{by_http}/signals/bad.name", json={})
    assert r.status_code == 400 and "signal name" in r.json()["error"]["message"]


async def _has(nc: Any, eid: str, name: str) -> bool:
    return any(e["name"] == name for e in await read_execution_events(NatsBus(nc), eid))


async def test_pause_holds_new_steps_while_running_ones_finish(stack) -> None:
    nc, http, user = stack["nc"], stack["http"], stack["user"]
    eid = await start(nc, PAUSE)
    await until(lambda: _has(nc, eid, "step.started"))
    r = await http.post(f"/api/executions/{eid}/pause", json={"reason": "maintenance"})
    assert r.status_code == 202, r.text
    await until(lambda: _has(nc, eid, "execution.paused"))
    await until(lambda: _has(nc, eid, "step.done"))  # the running step finished
    await asyncio.sleep(0.5)
    events = await read_execution_events(NatsBus(nc), eid)
    assert [e["entity_id"] for e in events if e["name"] == "step.scheduled"] == ["start"]
    st = await execution_status(NatsBus(nc), eid)
    assert st is not None and st["paused"] and st["status"] == "running"
    msg = await user.request("noetl.api.resume", json.dumps({"execution_id": eid}).encode(), timeout=10)
    assert json.loads(msg.data)["resume"] == "sent"
    assert (await finished(nc, eid))["result"] == "after"


async def test_pause_and_resume_in_the_client_and_cancel_while_paused(stack) -> None:
    nc = stack["nc"]
    eid = await start(nc, APPROVAL)
    await waiting(nc, eid)
    assert (await pause(NatsBus(nc), eid))["pause"] == "sent"
    await until(lambda: _has(nc, eid, "execution.paused"))
    r = await stack["http"].post(f"/api/executions/{eid}/cancel", json={})
    assert r.status_code == 202
    fin = await finished(nc, eid)
    assert fin["status"] == "cancelled"
    assert (await resume(NatsBus(nc), eid))["error"]["kind"] == "execution_finished"


TICK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tick, path: tests/outside/tick}
workflow:
  - step: start
    tool: {kind: noop, result: tick}
"""


async def test_schedules_over_http_and_the_cli(stack) -> None:
    nc, http = stack["nc"], stack["http"]
    r = await http.post("/api/catalog", content=TICK)
    assert r.status_code == 201, r.text
    r = await http.post("/api/schedules/bad.name", json={"path": "tests/outside/tick", "cron": "* * * * *"})
    assert r.status_code == 400 and "schedule name" in r.json()["error"]["message"]
    r = await http.post("/api/schedules/every2", json={"path": "tests/outside/tick", "cron": "0 61 * * *"})
    assert r.status_code == 400 and "cron" in r.json()["error"]["message"]
    r = await http.post(
        "/api/schedules/every2",
        json={"path": "tests/outside/tick", "cron": "*/2 * * * * *", "timezone": "America/New_York"},
    )
    assert r.status_code == 201, r.text

    async def scheduled() -> list[dict[str, Any]]:
        out = []
        for ev in await read_execution_events_all(nc):
            if (ev.get("payload") or {}).get("schedule") == "every2":
                out.append(ev)
        return out

    fired = await until(scheduled, timeout=10)
    st = await execution_status(NatsBus(nc), fired[0]["execution_id"])
    assert st is not None and st["schedule"] == "every2"
    r = await http.post("/api/schedules/every2/pause")
    assert r.status_code == 200 and r.json()["paused"] is True
    listed = (await http.get("/api/schedules")).json()["schedules"]
    assert [(s["name"], s["paused"], s["next_fire"]) for s in listed if s["name"] == "every2"] == [
        ("every2", True, None)
    ]
    cli = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "noetl.cli.main", "schedule", "delete", "every2", "--nats-url", stack["url"]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert (await http.delete("/api/schedules/every2")).status_code == 404


async def read_execution_events_all(nc: Any) -> list[dict[str, Any]]:
    from noetl.events import subjects as s
    from noetl.events.bus import read_messages

    msgs = await read_messages(
        NatsBus(nc), s.EVENTS_STREAM, [s.execution_event_filter("*", "playbook.execution.requested")]
    )
    return [ev for _, ev in msgs]
