"""Issue 31 over HTTP, against a real server, worker and nats-server: rerun, a loop's iteration
table past 50 iterations, lineage (children, reruns) and the refusal of a signal nothing awaits."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from noetl.events.nats_port import NatsBus
from noetl.server.api import ApiServer
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker
from tests.playbooks import approval, loop60
from tests.service.test_rerun import FLAKY

TOKEN = "user-" + uuid.uuid4().hex

LOOP60 = loop60("tests/api31/loop60", name="loop60")

PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: tests/api31/parent}
workflow:
  - step: start
    tool: {kind: playbook, path: tests/api31/child}
"""

CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: tests/api31/child}
workflow:
  - step: start
    tool: {kind: noop, result: 7}
"""


@pytest.fixture
async def http(nc: Any) -> AsyncIterator[httpx.AsyncClient]:
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    server, worker = (
        Server(NatsBus(nc), credentials=creds),
        Worker(NatsBus(nc), concurrency=4, credentials=creds),
    )
    await server.start()
    await worker.start()
    api = ApiServer(server.bus, server.requests, server.catalog, creds, host="127.0.0.1", port=0, token=TOKEN)
    await api.start()
    try:
        async with httpx.AsyncClient(
            base_url=api.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        ) as client:
            yield client
    finally:
        await api.stop()
        await worker.stop(drain=False)
        await server.stop()


async def start(http: httpx.AsyncClient, **body: Any) -> str:
    r = await http.post("/api/executions", json=body)
    assert r.status_code == 202, r.text
    return str(r.json()["execution_id"])


async def ended(http: httpx.AsyncClient, eid: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        body = (await http.get(f"/api/executions/{eid}")).json()
        if body.get("status") not in (None, "running"):
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.05)


async def test_rerun_over_http_links_both_ways(http: httpx.AsyncClient) -> None:
    original = await start(http, playbook=FLAKY)
    assert (await ended(http, original))["status"] == "failed"
    dry = await http.post(f"/api/executions/{original}/rerun", json={"dry_run": True})
    assert (
        dry.status_code == 200 and dry.json()["from_steps"] == ["divide"] and "execution_id" not in dry.json()
    )
    r = await http.post(f"/api/executions/{original}/rerun", json={"payload": {"divisor": 5}})
    assert r.status_code == 202, r.text
    rerun = r.json()["execution_id"]
    assert (await ended(http, rerun))["status"] == "success"
    back = (await http.get(f"/api/executions/{rerun}/lineage")).json()
    assert back["forked_from"]["from_execution_id"] == original
    forth = (await http.get(f"/api/executions/{original}/lineage")).json()
    assert [x["execution_id"] for x in forth["reruns"]] == [rerun]
    refused = await http.post(f"/api/executions/{original}/rerun", json={"from": "nowhere"})
    assert refused.status_code == 409 and refused.json()["error"]["kind"] == "rerun_refused"


async def test_iteration_57_of_60_is_found(http: httpx.AsyncClient) -> None:
    eid = await start(http, playbook=LOOP60)
    await ended(http, eid)
    first = (await http.get(f"/api/executions/{eid}/iterations", params={"step": "each"})).json()
    assert first["total"] == 60 and first["counts"]["done"] == 59 and first["counts"]["failed"] == 1
    assert [x["index"] for x in first["iterations"]] == list(range(50)) and first["next_offset"] == 50
    second = (
        await http.get(f"/api/executions/{eid}/iterations", params={"step": "each", "offset": 50})
    ).json()
    assert [x["index"] for x in second["iterations"]] == list(range(50, 60))
    failed = (
        await http.get(f"/api/executions/{eid}/iterations", params={"step": "each", "status": "failed"})
    ).json()
    [row] = failed["iterations"]
    assert row["index"] == 57 and row["attempts"] == 1 and "item 57 is bad" in row["error"]["message"]
    bad = await http.get(f"/api/executions/{eid}/iterations", params={"step": "nope"})
    assert bad.status_code == 404
    # task runs, paged: past the 50 a step's details show
    tasks = (await http.get(f"/api/executions/{eid}/tasks", params={"step": "each", "limit": 25})).json()
    assert tasks["total"] == 60 and len(tasks["tasks"]) == 25 and tasks["next_offset"] == 25
    errors = (await http.get(f"/api/executions/{eid}/tasks", params={"status": "error"})).json()["tasks"]
    assert [(t["step"], t["index"], t["error"]["kind"]) for t in errors] == [("each", 57, "python_error")]


async def test_children_are_linked_to_their_parent(http: httpx.AsyncClient) -> None:
    assert (await http.post("/api/catalog", json={"playbook": CHILD})).status_code in (200, 201)
    parent = await start(http, playbook=PARENT)
    assert (await ended(http, parent))["status"] == "success"
    [child] = (await http.get(f"/api/executions/{parent}/lineage")).json()["children"]
    assert child["status"] == "success" and child["path"] == "tests/api31/child"
    up = (await http.get(f"/api/executions/{child['execution_id']}/lineage")).json()
    assert up["parent_execution_id"] == parent
    # the path filter takes the start of a path
    listed = (await http.get("/api/executions", params={"path": "tests/api31/"})).json()["executions"]
    assert {parent, child["execution_id"]} <= {e["execution_id"] for e in listed}
    assert all(e["path"].startswith("tests/api31/") for e in listed)


async def test_a_signal_nothing_awaits_is_refused_unless_forced(http: httpx.AsyncClient) -> None:
    eid = await start(http, playbook=approval("tests/api31/approval"))
    deadline = time.monotonic() + 30
    while not (await http.get(f"/api/executions/{eid}")).json().get("waiting"):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    r = await http.post(f"/api/executions/{eid}/signals/aproval", json={"data": {"approved": True}})
    assert r.status_code == 409 and r.json()["error"]["kind"] == "signal_not_awaited"
    assert "it waits for approval" in r.json()["error"]["message"]
    forced = await http.post(f"/api/executions/{eid}/signals/aproval?force=true", json={})
    assert forced.status_code == 202
    ok = await http.post(
        f"/api/executions/{eid}/signals/approval", json={"data": {"approved": True, "by": "me"}}
    )
    assert ok.status_code == 202
    assert (await ended(http, eid))["result"] == "shipped"


NO_PATH = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: api31_nopath}
workflow:
  - step: start
    tool: {kind: noop, result: 1}
"""


async def test_a_catalog_playbook_without_metadata_path_is_listed_by_its_catalog_path(
    http: httpx.AsyncClient,
) -> None:
    """Issue 31: registered under its name, it was listed as `inline` with no catalog link."""
    r = await http.post("/api/catalog", json={"playbook": NO_PATH})
    assert r.status_code == 201 and r.json()["path"] == "api31_nopath"
    eid = await start(http, path="api31_nopath")
    body = await ended(http, eid)
    assert body["status"] == "success" and body["path"] == "api31_nopath"
    [item] = [e for e in (await http.get("/api/executions")).json()["executions"] if e["execution_id"] == eid]
    assert item["path"] == "api31_nopath"
