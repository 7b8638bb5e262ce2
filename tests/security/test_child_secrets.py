"""Item 2 of issue 26: secrets stay secrets across playbooks.

Before: ``kind: playbook`` args rendered from ``keychain.*`` were stored raw in the child's
``playbook.execution.requested``, served by the API, the console and ``noetl logs``."""

from __future__ import annotations

import json

from tests.security.conftest import ALICE, Deployment

PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: parent, path: team_a/parent}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool:
      - name: child
        kind: playbook
        path: team_a/child
        args: {token: "{{ keychain.CRED.value }}", header: "Bearer {{ keychain.CRED.value }}", n: 1}
"""

CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: child, path: team_a/child}
workload: {token: "", header: "", n: 0}
workflow:
  - step: start
    tool: {kind: noop, result: "{{ workload.token }} {{ workload.header }} {{ workload.n }}"}
"""


async def test_a_secret_passed_to_a_child_is_masked_in_its_request(deployment: Deployment) -> None:
    dep = deployment
    async with dep.http(ALICE) as alice:
        for text in (CHILD, PARENT.replace("CRED", dep.cred)):
            assert (await alice.post("/api/catalog", json={"playbook": text})).status_code == 201
    code, parent = await dep.run(ALICE, {"path": "team_a/parent"})
    assert code == 202 and parent["status"] == "success", parent
    events = await dep.all_events()
    child_requests = [
        e for e in events
        if e["name"] == "playbook.execution.requested" and e["payload"].get("path") == "team_a/child"
    ]
    assert child_requests, "the child ran"
    child = child_requests[-1]
    assert child["payload"]["payload"] == {"token": "***", "header": "Bearer ***", "n": 1}
    assert not dep.leaked(json.dumps(events))
    async with dep.http(ALICE) as alice:
        eid = child["execution_id"]
        seen = [
            (await alice.get(f"/api/executions/{eid}")).text,
            (await alice.get(f"/api/executions/{eid}/events")).text,
            (await alice.get(f"/api/executions/{eid}/logs")).text,
            (await alice.get(f"/api/executions/{parent['execution_id']}")).text,
        ]
    assert not dep.leaked(*seen)


DRIVER = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: driver, path: team_b/driver}
workflow:
  - step: start
    tool:
      - name: drive
        kind: playbook
        path: team_a/parent
"""


async def test_a_child_acts_for_whoever_started_its_parent(deployment: Deployment) -> None:
    """Before: bob's inline playbook (team_b) ran team_a's credentialed playbook as its child, with
    bob's inputs: the child request came from a worker, and nobody checked whose it was."""
    from tests.security.conftest import BOB

    dep = deployment
    async with dep.http(ALICE) as alice:
        for text in (CHILD, PARENT.replace("CRED", dep.cred)):
            assert (await alice.post("/api/catalog", json={"playbook": text})).status_code == 201
    code, out = await dep.run(BOB, {"playbook": DRIVER})
    assert code == 202 and out["status"] == "failed", out
    assert out["error"]["kind"] in ("child_failed", "step_failed"), out
    assert "forbidden" in json.dumps(out), out
    ran = [e for e in await dep.all_events()
           if e["name"] == "task.started" and e.get("parent_execution_id") == out["execution_id"]]
    assert ran == []
    assert not dep.leaked(json.dumps(await dep.all_events()))
