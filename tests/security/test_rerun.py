"""Issue 31's routes under issue 26's principals: a rerun acts on the original execution (its ctx,
its results) and starts a new one, so it is checked like both; the loop iterations, task runs and
lineage of an execution are read like its events; and ``fork`` is the rerun endpoints' word alone.

Before: any token could rerun any execution (``POST /api/executions/{id}/rerun`` had no check, and
the rerun's request was recorded without a principal, so neither the new execution's namespace
nor who started it was checked), read any execution's iterations, tasks and lineage, and forge a
``fork`` naming another namespace's execution in a plain request."""

from __future__ import annotations

import json
import uuid
from typing import Any

from noetl.events.bus import read_messages
from noetl.events.nats_port import NatsBus
from noetl.store.audit import AUDIT_STREAM
from tests.security.conftest import ALICE, BOB, ROOT, VIEWER, Deployment

FLAKY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: PATH}
workload: {divisor: 0}
workflow:
  - step: start
    next: {arcs: [{step: divide}]}
  - step: divide
    tool:
      - name: div
        kind: python
        args: {d: "{{ workload.divisor }}"}
        code: |
          def main(d):
              return 10 // d
"""


def flaky(path: str) -> str:
    return FLAKY.replace("PATH", path)


async def _failed(dep: Deployment) -> str:
    """An execution of team_a's that failed: one a rerun can fork."""
    async with dep.http(ALICE) as alice:
        r = await alice.post("/api/catalog", json={"playbook": flaky("team_a/flaky")})
        assert r.status_code == 201, r.text
    code, out = await dep.run(ALICE, {"path": "team_a/flaky", "payload": {}})
    assert code == 202 and out["status"] == "failed", out
    return str(out["execution_id"])


async def _forked_from(dep: Deployment, eid: str) -> list[dict[str, Any]]:
    return [
        e for e in await dep.all_events()
        if e["name"] == "execution.forked" and (e.get("payload") or {}).get("from_execution_id") == eid
    ]


async def test_an_operator_of_another_namespace_may_not_rerun(deployment: Deployment) -> None:
    dep = deployment
    eid = await _failed(dep)
    rerun = f"/api/executions/{eid}/rerun"
    async with dep.http(BOB) as bob, dep.http(VIEWER) as vera:
        # bob (operator of team_b) does not even learn that it exists: not a rerun, nor its plan
        for body in ({"payload": {"divisor": 2}}, {"dry_run": True}, {"from": "divide"}):
            r = await bob.post(rerun, json=body)
            assert r.status_code == 404 and r.json()["error"]["kind"] == "not_found", (body, r.text)
        # nor its loop iterations, task runs or lineage
        for url in (f"/api/executions/{eid}/iterations?step=divide", f"/api/executions/{eid}/tasks",
                    f"/api/executions/{eid}/lineage"):
            r = await bob.get(url)
            assert r.status_code == 404 and r.json()["error"]["kind"] == "not_found", (url, r.text)
        # a viewer of team_a reads them, and may not rerun it
        assert (await vera.get(f"/api/executions/{eid}/tasks")).status_code == 200
        assert (await vera.get(f"/api/executions/{eid}/lineage")).status_code == 200
        for body in ({"payload": {"divisor": 2}}, {"dry_run": True}):
            r = await vera.post(rerun, json=body)
            assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden", (body, r.text)
    assert await _forked_from(dep, eid) == []  # nothing was started for either

    # the same through the NATS service
    async def ask(body: dict[str, Any], token: str) -> tuple[Any, dict[str, Any]]:
        msg = await dep.nc.request(
            "noetl.api.rerun", json.dumps(body).encode(), timeout=10,
            headers={"Authorization": f"Bearer {token}"},
        )
        return (msg.headers or {}).get("Nats-Service-Error-Code"), json.loads(msg.data)

    code, out = await ask({"execution_id": eid, "payload": {"divisor": 2}}, BOB)
    assert code == "404" and out["error"]["kind"] == "not_found", out
    code, out = await ask({"execution_id": eid, "dry_run": True}, VIEWER)
    assert code == "403" and out["error"]["kind"] == "forbidden", out
    code, out = await ask({"execution_id": eid, "dry_run": True}, ALICE)
    assert code is None and out["from_steps"] == ["divide"] and "execution_id" not in out, out
    assert await _forked_from(dep, eid) == []


async def test_a_rerun_is_the_callers_and_checked_where_it_runs(deployment: Deployment) -> None:
    dep = deployment
    eid = await _failed(dep)
    async with dep.http(ALICE) as alice:
        # alice may rerun her namespace's execution, but not into a namespace she may not write
        elsewhere = {"playbook": flaky("team_b/flaky"), "payload": {"divisor": 2}}
        r = await alice.post(f"/api/executions/{eid}/rerun", json=elsewhere)
        assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden", r.text
        assert await _forked_from(dep, eid) == []
        r = await alice.post(f"/api/executions/{eid}/rerun", json={"payload": {"divisor": 2}})
        assert r.status_code == 202, r.text
        new_id = r.json()["execution_id"]
    requested = (await dep.events_of(new_id, "playbook.execution.requested"))[0]["payload"]
    assert requested["principal"]["name"] == "alice" and requested["namespace"] == "team_a", requested
    forked = await dep.events_of(new_id, "execution.forked")
    assert forked and forked[0]["payload"]["from_execution_id"] == eid
    audit = [r for _, r in await read_messages(NatsBus(dep.nc), AUDIT_STREAM, ["noetl.audit.actions"])]
    assert any(
        r["action"] == "rerun" and r["principal"] == "alice" and r["target"] == eid and r["outcome"] == "done"
        for r in audit
    ), audit


async def test_fork_is_the_rerun_endpoints_word(deployment: Deployment) -> None:
    """A hand-written ``fork`` would list bob's execution among the reruns of alice's, and seed it
    with whatever ctx he likes as if it came from hers."""
    dep = deployment
    eid = await _failed(dep)
    fork = {"from_execution_id": eid, "ctx": {}, "runs": [], "kept": [], "not_kept": []}
    request = {"playbook": flaky("team_b/flaky"), "payload": {"divisor": 2}, "fork": fork}
    async with dep.http(BOB) as bob:
        r = await bob.post("/api/executions", json=request)
        assert r.status_code == 400 and r.json()["error"]["kind"] == "request_invalid", r.text
        assert "fork" in r.json()["error"]["message"]
    msg = await dep.nc.request(
        "noetl.api.execute", json.dumps(request).encode(), timeout=10,
        headers={"Authorization": f"Bearer {BOB}"},
    )
    assert (msg.headers or {}).get("Nats-Service-Error-Code") == "400", msg.data
    assert await _forked_from(dep, eid) == []


async def test_lineage_lists_no_rerun_of_a_namespace_the_reader_may_not_read(deployment: Deployment) -> None:
    dep = deployment
    eid = await _failed(dep)
    async with dep.http(ROOT) as root, dep.http(ALICE) as alice:
        # an admin reruns it with team_b's copy of the playbook: the rerun runs in team_b
        elsewhere = {"playbook": flaky("team_b/flaky"), "payload": {"divisor": 2}}
        r = await root.post(f"/api/executions/{eid}/rerun", json=elsewhere)
        assert r.status_code == 202, r.text
        new_id = r.json()["execution_id"]
        await dep.events_of(new_id, "execution.forked")
        reruns = (await root.get(f"/api/executions/{eid}/lineage")).json()["reruns"]
        assert [x["execution_id"] for x in reruns] == [new_id]
        assert (await alice.get(f"/api/executions/{eid}/lineage")).json()["reruns"] == []
        page = await alice.get(f"/ui/executions/{eid}")
        assert page.status_code == 200 and new_id not in page.text


async def test_the_console_checks_the_rerun_and_iteration_pages(deployment: Deployment) -> None:
    dep = deployment
    eid = await _failed(dep)
    async with dep.http(BOB) as bob, dep.http(VIEWER) as vera, dep.http(ALICE) as alice:
        assert (await bob.get(f"/ui/executions/{eid}/rerun")).status_code == 404
        r = await bob.post(f"/ui/executions/{eid}/rerun/start", data={"payload": '{"divisor": 2}'})
        assert r.status_code == 404, r.text
        assert (await bob.get(f"/ui/executions/{eid}/runs/{uuid.uuid4().hex}/iterations")).status_code == 404
        r = await vera.get(f"/ui/executions/{eid}/rerun")
        assert r.status_code == 403 and "may not rerun" in r.text
        r = await vera.post(f"/ui/executions/{eid}/rerun/start", data={"payload": '{"divisor": 2}'})
        assert r.status_code == 403
        assert await _forked_from(dep, eid) == []
        r = await alice.post(
            f"/ui/executions/{eid}/rerun/start",
            data={"payload": '{"divisor": 2}', "request_id": uuid.uuid4().hex},
        )
        assert r.status_code == 303, r.text
        new_id = r.headers["location"].rsplit("/", 1)[-1]
    requested = (await dep.events_of(new_id, "playbook.execution.requested"))[0]["payload"]
    assert requested["principal"]["name"] == "alice", requested
