"""The HTTP API against a real server, worker and nats-server: every endpoint, auth and the audit."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from noetl.events.nats_port import NatsBus
from noetl.events.runtime import RuntimeRegistrar
from noetl.server.api import ApiServer
from noetl.server.api.launch import start_operations
from noetl.server.service import Server
from noetl.store.audit import AUDIT_STREAM, CREDENTIALS_AUDIT_SUBJECT
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker

TOKEN, ADMIN = "user-" + uuid.uuid4().hex, "admin-" + uuid.uuid4().hex

CHAIN = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain, path: tests/api/chain, version: "1"}
workload: {n: 3}
workflow:
  - step: start
    next: {arcs: [{step: double, args: {x: "{{ workload.n }}"}}]}
  - step: double
    tool:
      - name: calc
        kind: python
        args: {x: "{{ args.x }}"}
        code: |
          def main(x):
              return x * 2
        spec:
          policy:
            rules:
              - else: {then: {do: continue, set_ctx: {doubled: "{{ outcome.result }}"}}}
"""

SLOW = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: slow, path: tests/api/slow}
workflow:
  - step: start
    tool:
      - name: wait
        kind: python
        code: |
          import time
          def main():
              for _ in range(1200):
                  time.sleep(0.05)
              return "too late"
"""


@pytest.fixture
async def stack(nc) -> AsyncIterator[dict[str, Any]]:
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    bus = NatsBus(nc)
    server, worker = Server(bus, credentials=creds), Worker(bus, concurrency=4, credentials=creds)
    await server.start()
    await worker.start()
    api = ApiServer(
        server.bus, server.requests, server.catalog, creds,
        host="127.0.0.1", port=0, token=TOKEN, admin_token=ADMIN,
    )
    await api.start()
    server.observer = api.collector.observe  # as start_operations wires them
    worker_ops = await start_operations(NatsBus(nc), "worker", worker, heartbeat=0.2, ttl=2.0)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=api.url, headers=auth, timeout=30) as http:
        try:
            assert worker_ops.registrar is not None
            yield {"http": http, "api": api, "nc": nc, "worker_id": worker_ops.registrar.id}
        finally:
            await worker_ops.stop()
            await api.stop()
            await worker.stop(drain=False)
            await server.stop()


async def sse_events(http: httpx.AsyncClient, execution_id: str, **headers: str) -> list[dict[str, Any]]:
    out = []
    hdrs = {"Accept": "text/event-stream", **headers}
    async with http.stream("GET", f"/api/executions/{execution_id}/events", headers=hdrs) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


async def test_start_follow_inspect_and_list(stack) -> None:
    http = stack["http"]
    r = await http.post("/api/executions", json={"playbook": CHAIN, "payload": {"n": 21}})
    assert r.status_code == 202, r.text
    eid = r.json()["execution_id"]
    streamed = await sse_events(http, eid)  # replays, follows, ends after playbook.processed
    names = [e["name"] for e in streamed]
    assert names[0] == "playbook.execution.requested" and names[-1] == "playbook.processed"
    assert len({e["event_id"] for e in streamed}) == len(streamed)

    r = await http.get(f"/api/executions/{eid}")
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success" and body["result"] == 42
    assert body["ctx"] == {"doubled": 42} and body["steps"]["double"][0]["status"] == "done"
    assert body["path"] == "tests/api/chain" and body["events"] == len(streamed)

    listed = (await http.get(f"/api/executions/{eid}/events")).json()
    assert [e["event_id"] for e in listed] == [e["event_id"] for e in streamed]
    # resume after the third event, as an EventSource does after a reconnect
    resumed = await sse_events(http, eid, **{"Last-Event-ID": streamed[2]["event_id"]})
    assert resumed == streamed[3:]

    r = await http.post("/api/executions", json={"playbook": CHAIN, "payload": {"n": 1}})
    second = r.json()["execution_id"]
    await sse_events(http, second)
    page = (await http.get("/api/executions", params={"path": "tests/api/chain", "limit": 1})).json()
    assert [e["execution_id"] for e in page["executions"]] == [second]
    page2 = (
        await http.get("/api/executions", params={"path": "tests/api/chain", "before": page["next_cursor"]})
    ).json()
    assert eid in [e["execution_id"] for e in page2["executions"]]
    done = (await http.get("/api/executions", params={"status": "success", "limit": 1000})).json()[
        "executions"
    ]
    assert {eid, second} <= {e["execution_id"] for e in done}
    assert all(e["status"] == "success" for e in done)
    running = (await http.get("/api/executions", params={"status": "running"})).json()["executions"]
    assert eid not in {e["execution_id"] for e in running}


async def test_request_id_makes_a_retried_post_idempotent(stack) -> None:
    http, rid = stack["http"], uuid.uuid4().hex
    a = (await http.post("/api/executions", json={"playbook": CHAIN, "request_id": rid})).json()
    b = (await http.post("/api/executions", json={"playbook": CHAIN, "request_id": rid})).json()
    c = (await http.post("/api/executions", json={"playbook": CHAIN})).json()
    assert a == b and c["execution_id"] != a["execution_id"]
    await sse_events(http, a["execution_id"])
    await sse_events(http, c["execution_id"])


async def test_invalid_requests_are_400_and_invalid_playbooks_422(stack) -> None:
    http = stack["http"]
    r = await http.post("/api/executions", content=b"{not json")
    assert r.status_code == 400 and r.json()["error"]["kind"] == "request_invalid"
    r = await http.post("/api/executions", json={"payload": {}})
    assert r.status_code == 400 and "path" in r.json()["error"]["message"]
    r = await http.post("/api/executions", json={"playbook": CHAIN.replace("kind: python", "kind: teleport")})
    assert r.status_code == 422
    err = r.json()["error"]
    assert err["kind"] == "playbook_invalid" and "teleport" in json.dumps(err["problems"])
    assert (await http.get(f"/api/executions/{uuid.uuid4().hex}")).status_code == 404
    assert (await http.get(f"/api/executions/{uuid.uuid4().hex}/events")).status_code == 404
    assert (await http.get("/api/executions/a.b*")).status_code == 400
    assert (await http.get("/api/executions", params={"limit": "x"})).status_code == 400
    huge = b'{"playbook": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    assert (await http.post("/api/executions", content=huge)).status_code == 413
    assert (await http.post("/api/catalog", content=huge)).status_code == 413


async def test_catalog_register_list_show_and_run_by_path(stack) -> None:
    http = stack["http"]
    yaml_text = CHAIN.replace("tests/api/chain", "tests/api/cat")
    r = await http.post("/api/catalog", content=yaml_text, headers={"Content-Type": "application/yaml"})
    assert r.status_code == 201 and r.json()["path"] == "tests/api/cat"
    v2 = yaml_text.replace('version: "1"', 'version: "2"')
    assert (await http.post("/api/catalog", json={"playbook": v2})).status_code == 201
    listed = (await http.get("/api/catalog")).json()
    assert {("tests/api/cat", "1"), ("tests/api/cat", "2")} <= {(e["path"], e["version"]) for e in listed}
    r = await http.get("/api/catalog/tests/api/cat", params={"version": "1"})
    assert r.status_code == 200 and r.text == yaml_text
    assert (await http.get("/api/catalog/tests/api/cat")).text == v2
    assert (await http.get("/api/catalog/tests/api/none")).status_code == 404
    r = await http.post("/api/catalog", content=yaml_text.replace("workflow:", "vars: {}\nworkflow:"))
    assert r.status_code == 422 and r.json()["error"]["problems"]
    assert (await http.post("/api/catalog", json={"nope": 1})).status_code == 400
    r = await http.post(
        "/api/executions", json={"path": "tests/api/cat", "version": "1", "payload": {"n": 4}}
    )
    eid = r.json()["execution_id"]
    await sse_events(http, eid)
    assert (await http.get(f"/api/executions/{eid}")).json()["result"] == 8


async def test_cancel_stops_a_running_execution(stack) -> None:
    http = stack["http"]
    eid = (await http.post("/api/executions", json={"playbook": SLOW})).json()["execution_id"]
    hdrs = {"Accept": "text/event-stream"}
    names = []
    async with http.stream("GET", f"/api/executions/{eid}/events", headers=hdrs) as r:
        async for line in r.aiter_lines():
            if not line.startswith("data: "):
                continue
            ev = json.loads(line[6:])
            names.append(ev["name"])
            if ev["name"] == "step.scheduled":  # the worker's own events are stored as a task ends
                r2 = await http.post(f"/api/executions/{eid}/cancel", json={"reason": "test says stop"})
                assert r2.status_code == 202 and r2.json() == {"execution_id": eid, "cancel": "requested"}
    assert "execution.cancel.requested" in names and names[-1] == "playbook.processed"
    body = (await http.get(f"/api/executions/{eid}")).json()
    assert body["status"] == "cancelled" and body["error"]["kind"] == "cancelled"
    listed = (await http.get("/api/executions", params={"status": "cancelled"})).json()["executions"]
    assert eid in {e["execution_id"] for e in listed}


async def test_auth_401_without_token_and_probes_open(stack) -> None:
    url = stack["api"].url
    async with httpx.AsyncClient(base_url=url, timeout=10) as anon:
        for method, path in (("GET", "/api/executions"), ("POST", "/api/catalog"), ("GET", "/api/runtime")):
            r = await anon.request(method, path)
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        r = await anon.get("/api/credentials", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        assert (
            await anon.get("/api/catalog", headers={"Authorization": f"Bearer {ADMIN}"})
        ).status_code == 200
        assert (await anon.get("/health")).json() == {"status": "ok"}
        r = await anon.get("/ready")
        assert r.status_code == 200 and r.json()["status"] == "ready" and all(r.json()["checks"].values())
        assert (await anon.get("/metrics")).status_code == 200
        spec = (await anon.get("/openapi.json")).json()
    assert spec["openapi"].startswith("3.")
    for path in ("/api/executions", "/api/executions/{execution_id}/events", "/api/credentials/{name}"):
        assert path in spec["paths"], path
    assert spec["paths"]["/health"]["get"]["security"] == []


async def audit_records(nc: Any) -> list[dict[str, Any]]:
    from noetl.events.bus import read_messages

    return [r for _, r in await read_messages(NatsBus(nc), AUDIT_STREAM, [CREDENTIALS_AUDIT_SUBJECT])]


async def test_credentials_api_with_audit(stack) -> None:
    http, nc = stack["http"], stack["nc"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    name, secret = f"pg-{uuid.uuid4().hex[:8]}", "s3cr3t-" + uuid.uuid4().hex
    body = {"name": name, "kind": "postgres", "data": {"password": secret}}
    # a user token runs playbooks; it may not create, overwrite or delete credentials
    r = await http.post("/api/credentials", json=body)
    assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden", r.text
    r = await http.post("/api/credentials", json=body, headers=admin)
    assert r.status_code == 201 and r.json() == {
        "name": name,
        "kind": "postgres",
        "scope": {"paths": ["*"], "inline": False},
    }
    listed = (await http.get("/api/credentials")).json()
    assert {"name": name, "kind": "postgres"} in listed and secret not in json.dumps(listed)
    assert (await http.get(f"/api/credentials/{name}")).json() == {"name": name, "kind": "postgres"}

    r = await http.get(f"/api/credentials/{name}", params={"include_data": "true"})
    assert r.status_code == 403 and secret not in r.text
    r = await http.get(
        f"/api/credentials/{name}", params={"include_data": "true", "execution_id": "e-42"}, headers=admin
    )
    assert r.status_code == 200 and r.json()["data"] == {"password": secret}

    mine = [a for a in await audit_records(nc) if a["credential"] == name]
    reads = [a for a in mine if a["action"] == "credential.read"]
    assert [a["outcome"] for a in reads] == ["denied", "granted"]
    assert reads[1]["execution_id"] == "e-42" and reads[1]["kind"] == "postgres"
    assert reads[0]["who"].startswith("token:") and reads[0]["who"] != reads[1]["who"]
    raw = json.dumps(mine)
    assert secret not in raw and TOKEN not in raw and ADMIN not in raw

    assert (await http.delete(f"/api/credentials/{name}")).status_code == 403
    assert (await http.delete(f"/api/credentials/{name}", headers=admin)).status_code == 204
    assert (await http.get(f"/api/credentials/{name}")).status_code == 404
    assert (await http.delete(f"/api/credentials/{name}", headers=admin)).status_code == 404
    bad = await http.post("/api/credentials", json={"name": "a b", "data": {}}, headers=admin)
    assert bad.status_code == 400
    actions = {(a["action"], a["outcome"]) for a in await audit_records(nc) if a["credential"] == name}
    assert ("credential.delete", "deleted") in actions and ("credential.delete", "denied") in actions


EXFILTRATE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: exfil, path: NAME}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool: {kind: noop, result: "{{ keychain.CRED.token | reverse | join }}"}
"""


async def test_a_credential_is_used_only_within_its_scope(stack) -> None:
    """Before: any inline playbook could declare any credential and return it reversed."""
    http, nc = stack["http"], stack["nc"]
    admin = {"Authorization": f"Bearer {ADMIN}"}
    cred, token = f"team_{uuid.uuid4().hex[:6]}", "tok-" + uuid.uuid4().hex
    r = await http.post(
        "/api/credentials",
        json={"name": cred, "kind": "secret", "data": {"token": token}, "scope": {"paths": ["team_a/"]}},
        headers=admin,
    )
    assert r.status_code == 201, r.text

    async def run(body: dict[str, Any]) -> dict[str, Any]:
        eid = (await http.post("/api/executions", json=body)).json()["execution_id"]
        await sse_events(http, eid)  # until it is processed
        return (await http.get(f"/api/executions/{eid}")).json()

    inline = EXFILTRATE.replace("CRED", cred).replace("NAME", "team_a/exfil")
    out = await run({"playbook": inline})
    assert out["status"] == "failed" and out["error"]["kind"] == "credential_out_of_scope", out
    assert token[::-1] not in json.dumps(out)
    for path, allowed in (("team_b/exfil", False), ("team_a/exfil", True)):
        text = EXFILTRATE.replace("CRED", cred).replace("NAME", path)
        assert (await http.post("/api/catalog", json={"playbook": text})).status_code in (200, 201)
        out = await run({"path": path})
        if allowed:
            assert out["status"] == "success", out
        else:
            assert out["status"] == "failed" and out["error"]["kind"] == "credential_out_of_scope", path
    # the worker recorded the one use it made, for that execution
    uses = [a for a in await audit_records(nc) if a["credential"] == cred and a["action"] == "credential.use"]
    assert len(uses) == 1 and uses[0]["outcome"] == "granted" and uses[0]["who"].startswith("worker:"), uses


async def test_runtime_lists_live_processes(stack) -> None:
    http, nc = stack["http"], stack["nc"]
    reg = RuntimeRegistrar(
        NatsBus(nc), "worker", lambda: {"pool": "api-test", "concurrency": 3, "running": 1}
    )
    await reg.start()
    try:
        entries = (await http.get("/api/runtime", params={"role": "worker"})).json()
        mine = [e for e in entries if e["id"] == reg.id]
        assert len(mine) == 1 and mine[0]["pool"] == "api-test" and mine[0]["concurrency"] == 3
        assert {"role", "pool", "concurrency", "running", "version", "started_at", "host"} <= set(mine[0])
    finally:
        await reg.stop()
    assert reg.id not in {e["id"] for e in (await http.get("/api/runtime")).json()}


def metric(text: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} " if labels else f"{name} "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_metrics_count_executions_durations_and_queues(stack) -> None:
    http = stack["http"]
    async with httpx.AsyncClient(base_url=stack["api"].url, timeout=10) as anon:
        eid = (await http.post("/api/executions", json={"playbook": CHAIN})).json()["execution_id"]
        await sse_events(http, eid)
        text = ""
        worker_id = stack["worker_id"]
        for _ in range(200):  # executions are folded and task durations sent by heartbeat: wait
            text = (await anon.get("/metrics")).text
            if metric(text, "noetl_task_duration_seconds_count", status="ok", worker=worker_id) >= 1:
                break
            await asyncio.sleep(0.05)
    assert metric(text, "noetl_executions", status="success") >= 1
    assert metric(text, "noetl_step_duration_seconds_count", status="done") >= 1
    assert "# TYPE noetl_task_duration_seconds histogram" in text
    assert f'noetl_task_duration_seconds_bucket{{le="+Inf",status="ok",worker="{worker_id}"}}' in text
    assert "noetl_commands_in_flight " in text
    assert 'noetl_consumer_pending{consumer="noetl-worker-default",stream="NOETL_COMMANDS"}' in text
    assert 'noetl_consumer_pending{consumer="noetl-server-requests",stream="NOETL_REQUESTS"}' in text
    assert 'noetl_http_requests_total{code="202",endpoint="create_execution",method="POST"}' in text
