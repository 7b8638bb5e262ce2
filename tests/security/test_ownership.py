"""Items 3 and 4 of issue 26: who may act on what, and every action names its caller.

Before: any user token approved any approval, paused, resumed or cancelled any execution, replaced
an admin's schedule, squatted ``schedule.<name>.<due>`` request ids and set ``schedule`` /
``parent_execution_id`` itself; the NATS service answered anyone."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from noetl.events import subjects as s
from noetl.events.bus import read_messages
from noetl.events.ids import execution_id_for
from noetl.events.nats_port import NatsBus
from noetl.store.audit import AUDIT_STREAM
from tests.security.conftest import ALICE, BOB, ROOT, VIEWER, Deployment

WAITS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: approval, path: team_a/approval}
workflow:
  - step: start
    spec: {policy: {lifecycle: {await: {signal: approve, timeout_s: 60}}}}
    tool: {kind: noop, result: "{{ args.signal }}"}
"""


async def _started(dep: Deployment) -> str:
    async with dep.http(ALICE) as alice:
        assert (await alice.post("/api/catalog", json={"playbook": WAITS})).status_code == 201
        r = await alice.post("/api/executions", json={"path": "team_a/approval"})
        assert r.status_code == 202, r.text
        return str(r.json()["execution_id"])


async def test_another_namespace_cannot_see_or_touch_an_execution(deployment: Deployment) -> None:
    dep = deployment
    eid = await _started(dep)
    async with dep.http(BOB) as bob, dep.http(VIEWER) as vera, dep.http(ALICE) as alice:
        for method, url, body in (
            ("GET", f"/api/executions/{eid}", None),
            ("GET", f"/api/executions/{eid}/events", None),
            ("GET", f"/api/executions/{eid}/logs", None),
            ("POST", f"/api/executions/{eid}/signals/approve", {"data": {"by": "the CFO"}}),
            ("POST", f"/api/executions/{eid}/pause", {}),
            ("POST", f"/api/executions/{eid}/resume", {}),
            ("POST", f"/api/executions/{eid}/cancel", {}),
        ):
            r = await bob.request(method, url, json=body)
            assert r.status_code == 404 and r.json()["error"]["kind"] == "not_found", (url, r.text)
        listed = (await bob.get("/api/executions")).json()["executions"]
        assert eid not in {e["execution_id"] for e in listed}
        # a viewer of team_a sees it but may not act on it
        assert (await vera.get(f"/api/executions/{eid}")).status_code == 200
        r = await vera.post(f"/api/executions/{eid}/signals/approve", json={"data": {}})
        assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden"
        r = await vera.post("/api/executions", json={"path": "team_a/approval"})
        assert r.status_code == 403, r.text
        # its owner's namespace signals it; the record names who
        r = await alice.post(f"/api/executions/{eid}/signals/approve", json={"data": {"by": "the CFO"}})
        assert r.status_code == 202, r.text
    received = await dep.events_of(eid, "signal.received")
    events = [e for e in await dep.all_events() if e["execution_id"] == eid]
    assert len(received) == 1 and received[0]["payload"]["principal"] == "alice", received
    requested = next(e for e in events if e["name"] == "playbook.execution.requested")
    grant = {"name": "alice", "role": "operator", "namespaces": ["team_a"]}
    assert requested["payload"]["principal"] == grant
    assert requested["payload"]["namespace"] == "team_a"
    audit = [r for _, r in await read_messages(NatsBus(dep.nc), AUDIT_STREAM, ["noetl.audit.actions"])]
    assert any(
        r["action"] == "signal" and r["principal"] == "alice" and r["target"].startswith(eid) for r in audit
    )


async def test_reserved_request_fields_are_the_servers(deployment: Deployment) -> None:
    dep = deployment
    async with dep.http(ALICE) as alice:
        assert (await alice.post("/api/catalog", json={"playbook": WAITS})).status_code == 201
        for extra in (
            {"request_id": "schedule.nightly.2030-01-01T00:00:00+00:00"},
            {"schedule": "nightly"},
            {"parent_execution_id": uuid.uuid4().hex},
            {"parent_iter": {"index": 0}},
        ):
            r = await alice.post("/api/executions", json={"path": "team_a/approval", **extra})
            assert r.status_code == 400 and r.json()["error"]["kind"] == "request_invalid", (extra, r.text)
    # nor over the request stream itself: refused, and nothing recorded under the schedule's id
    squat: dict[str, Any] = {
        "request_id": f"schedule.nightly.{uuid.uuid4().hex}", "path": "team_a/approval", "payload": {}
    }
    await dep.nc.jetstream().publish(s.REQUEST_SUBJECT, json.dumps(squat).encode())
    plain: dict[str, Any] = {"request_id": uuid.uuid4().hex, "path": "team_a/approval", "payload": {}}
    await dep.nc.jetstream().publish(s.REQUEST_SUBJECT, json.dumps(plain).encode())  # handled after it
    async with dep.http(ROOT) as root:
        plain_url = f"/api/executions/{execution_id_for(plain['request_id'])}"
        for _ in range(200):
            if (await root.get(plain_url)).status_code == 200:
                break
            await asyncio.sleep(0.05)
        r = await root.get(f"/api/executions/{execution_id_for(squat['request_id'])}")
        assert r.status_code == 404, r.text


async def test_schedules_belong_to_their_namespace(deployment: Deployment) -> None:
    dep = deployment
    name = f"nightly_{uuid.uuid4().hex[:6]}"
    async with dep.http(ALICE) as alice, dep.http(BOB) as bob:
        assert (await alice.post("/api/catalog", json={"playbook": WAITS})).status_code == 201
        r = await alice.post(f"/api/schedules/{name}", json={"path": "team_a/approval", "cron": "0 3 * * *"})
        assert r.status_code == 201 and r.json()["principal"] == "alice", r.text
        # bob may neither replace, pause nor delete it, nor point a schedule of his at team_a
        r = await bob.post(f"/api/schedules/{name}", json={"path": "team_b/x", "cron": "* * * * *"})
        assert r.status_code == 403, r.text
        assert (await bob.post(f"/api/schedules/{name}/pause")).status_code == 403
        assert (await bob.delete(f"/api/schedules/{name}")).status_code == 403
        r = await bob.post("/api/schedules/bobs", json={"path": "team_a/approval", "cron": "* * * * *"})
        assert r.status_code == 403, r.text
        assert name not in {x["name"] for x in (await bob.get("/api/schedules")).json()["schedules"]}
        assert (await alice.delete(f"/api/schedules/{name}")).status_code == 200


async def test_the_nats_service_checks_the_caller(deployment: Deployment) -> None:
    dep = deployment
    eid = await _started(dep)

    async def ask(subject: str, body: dict[str, Any], token: str | None) -> tuple[Any, dict[str, Any]]:
        msg = await dep.nc.request(
            subject, json.dumps(body).encode(), timeout=10,
            headers={"Authorization": f"Bearer {token}"} if token else None,
        )
        return (msg.headers or {}).get("Nats-Service-Error-Code"), json.loads(msg.data)

    code, out = await ask("noetl.api.status", {"execution_id": eid}, None)
    assert code == "401" and out["error"]["kind"] == "unauthorized"
    code, out = await ask("noetl.api.signal", {"execution_id": eid, "signal": "approve"}, BOB)
    assert code == "404", out
    code, out = await ask("noetl.api.execute", {"path": "team_a/approval"}, BOB)
    assert code == "403" and out["error"]["kind"] == "forbidden", out
    code, out = await ask("noetl.api.status", {"execution_id": eid}, ALICE)
    assert code is None and out["status"] == "running", out
    code, out = await ask("noetl.api.status", {"execution_id": eid}, VIEWER)  # a viewer of team_a reads
    assert code is None and out["status"] == "running", out
    for subject, body in (("noetl.api.cancel", {"execution_id": eid}),
                          ("noetl.api.execute", {"path": "team_a/approval"})):
        code, out = await ask(subject, body, VIEWER)
        assert code == "403" and out["error"]["kind"] == "forbidden", (subject, out)
    code, out = await ask("noetl.api.cancel", {"execution_id": eid}, ALICE)
    assert code is None, out
    cancel = await dep.events_of(eid, "execution.cancel.requested")
    assert cancel and cancel[0]["payload"]["principal"] == "alice"


APPROVAL = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: payout, path: team_a/payout}
workflow:
  - step: start
    spec: {policy: {lifecycle: {await: {signal: approve, timeout_s: 60, by: {roles: [admin]}}}}}
    tool: {kind: noop, result: "{{ args.signal }}"}
"""


async def test_an_await_may_name_who_answers(deployment: Deployment) -> None:
    dep = deployment
    async with dep.http(ALICE) as alice, dep.http(ROOT) as root:
        assert (await alice.post("/api/catalog", json={"playbook": APPROVAL})).status_code == 201
        eid = (await alice.post("/api/executions", json={"path": "team_a/payout"})).json()["execution_id"]
        r = await alice.post(f"/api/executions/{eid}/signals/approve", json={"data": {"by": "the CFO"}})
        assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden", r.text
        msg = await dep.nc.request(
            "noetl.api.signal", json.dumps({"execution_id": eid, "signal": "approve"}).encode(),
            timeout=10, headers={"Authorization": f"Bearer {ALICE}"},
        )
        assert (msg.headers or {}).get("Nats-Service-Error-Code") == "403", msg.data
        r = await root.post(f"/api/executions/{eid}/signals/approve", json={"data": {"ok": True}})
        assert r.status_code == 202, r.text
    received = await dep.events_of(eid, "signal.received")
    assert [e["payload"]["principal"] for e in received] == ["root"]


async def test_console_actions_are_audited_with_their_principal(deployment: Deployment) -> None:
    """Before: a pause, resume, signal or cancel from the console left no record on
    ``noetl.audit.actions`` (the API's did): the trail did not say who acted through the console."""
    import httpx

    dep = deployment
    eid = await _started(dep)
    api = dep.api
    async with httpx.AsyncClient(base_url=api.url, timeout=30, follow_redirects=False) as browser:
        r = await browser.post("/ui/login", data={"token": ALICE, "next": "/ui/executions"},
                               headers={"Origin": api.url})
        assert r.status_code == 303, r.text
        same = {"Cookie": f"noetl_session={r.cookies.get('noetl_session')}", "Origin": api.url}
        for action, form in (("pause", {}), ("resume", {}), ("approve", {"signal": "approve"}),
                             ("cancel", {})):
            r = await browser.post(f"/ui/executions/{eid}/{action}", data=form, headers=same)
            assert r.status_code in (200, 303), (action, r.status_code, r.text[:300])
    audit = [r for _, r in await read_messages(NatsBus(dep.nc), AUDIT_STREAM, ["noetl.audit.actions"])]
    mine = [r for r in audit if r.get("via") == "console" and r["target"].startswith(eid)]
    assert {(r["action"], r["principal"], r["outcome"]) for r in mine} >= {
        ("pause", "alice", "done"), ("resume", "alice", "done"), ("signal", "alice", "done"),
        ("cancel", "alice", "done"),
    }, mine
    approved = next(r for r in mine if r["action"] == "signal")
    assert approved["target"] == f"{eid}/approve" and approved["answer"] == "approve"
    assert all(r["namespace"] is None or r["namespace"] == "team_a" for r in mine)
