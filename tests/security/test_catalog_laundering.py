"""Item 1 of issue 26: the catalog may not launder a credential.

Before: any user token registered ``team_a/evil`` under a credential's scope and ran it (the
secret came back), ``team.a/job`` replaced ``team_a/job``, and re-registering a version replaced
an admin's reviewed text."""

from __future__ import annotations

import json

from noetl.dsl.cache import digest_of
from noetl.events.nats_port import NatsBus
from noetl.store.catalog import Catalog
from tests.security.conftest import ALICE, BOB, EXFILTRATE, ROOT, Deployment


def exfil(dep: Deployment, path: str) -> str:
    return EXFILTRATE.replace("CRED", dep.cred).replace("PATH", path)


async def test_another_namespace_cannot_register_under_the_scope(deployment: Deployment) -> None:
    dep = deployment
    async with dep.http(BOB) as bob:
        r = await bob.post("/api/catalog", json={"playbook": exfil(dep, "team_a/evil")})
        assert r.status_code == 403 and r.json()["error"]["kind"] == "forbidden", r.text
        # nor run it inline, nor by path: nothing runs, nothing comes back
        code, out = await dep.run(BOB, {"playbook": exfil(dep, "team_a/evil")})
        assert code == 403 and out["error"]["kind"] == "forbidden", out
        code, out = await dep.run(BOB, {"path": "team_a/evil"})
        assert code == 403 and out["error"]["kind"] == "forbidden", out
        # in bob's own namespace it is registered, and runs, but the scope keeps the secret
        r = await bob.post("/api/catalog", json={"playbook": exfil(dep, "team_b/evil")})
        assert r.status_code == 201, r.text
        assert r.json()["principal"] == {"name": "bob", "role": "operator"}
        code, out = await dep.run(BOB, {"path": "team_b/evil"})
        assert code == 400 and out["error"]["kind"] == "credential_out_of_scope", out
    assert not dep.leaked(json.dumps(await dep.all_events()))


async def test_paths_map_to_keys_injectively(deployment: Deployment) -> None:
    dep = deployment
    job = exfil(dep, "team_a/job")
    async with dep.http(ALICE) as alice, dep.http(ROOT) as root:
        assert (await alice.post("/api/catalog", json={"playbook": job})).status_code == 201
        # an admin's playbook under a path that used to share team_a/job's key
        other = exfil(dep, "team.a/job").replace("| reverse | join", "| length")
        assert (await root.post("/api/catalog", json={"playbook": other})).status_code == 201
        assert (await alice.get("/api/catalog/team_a/job")).text == job
        assert (await root.get("/api/catalog/team.a/job")).text == other
    catalog = await Catalog.open(NatsBus(dep.nc))
    for path in ("team a/job", "team=2Ea/job", "tëam/job", "x/latest"):
        await catalog.register(exfil(dep, path))
    assert await catalog.get("team_a/job") == job


async def test_a_version_once_written_is_never_replaced(deployment: Deployment) -> None:
    dep = deployment
    reviewed = exfil(dep, "team_a/pinned").replace("metadata: {", 'metadata: {version: "1", ')
    changed = reviewed.replace("| reverse | join", "| upper")
    async with dep.http(ROOT) as root, dep.http(ALICE) as alice:
        r = await root.post("/api/catalog", json={"playbook": reviewed})
        assert r.status_code == 201 and r.json()["principal"]["name"] == "root", r.text
        again = await alice.post("/api/catalog", json={"playbook": reviewed})
        assert again.status_code == 201 and again.json()["principal"]["name"] == "root"  # idempotent
        r = await alice.post("/api/catalog", json={"playbook": changed})
        assert r.status_code == 409 and r.json()["error"]["kind"] == "catalog_conflict", r.text
        assert (await alice.get("/api/catalog/team_a/pinned", params={"version": "1"})).text == reviewed
        listed = {(e["path"], e["version"]): e for e in (await alice.get("/api/catalog")).json()}
        entry = listed[("team_a/pinned", "1")]
        assert entry["digest"] == digest_of(reviewed) and entry["principal"]["name"] == "root"
        assert all(p.startswith("team_a/") for p, _ in listed), "alice sees team_a only"


async def test_a_scope_pinned_to_a_digest_refuses_other_text(deployment: Deployment) -> None:
    dep = deployment
    from noetl.store.credentials import CredentialStore

    reviewed = exfil(dep, "team_a/reviewed")
    rewritten = reviewed.replace("| reverse | join", "| list | join('-')")
    async with dep.http(ALICE) as alice:
        assert (await alice.post("/api/catalog", json={"playbook": reviewed})).status_code == 201
    store = await CredentialStore.open(NatsBus(dep.nc))
    record = await store._record(dep.cred)
    assert record is not None
    record["scope"] = {"paths": ["team_a/"], "inline": False, "digests": [digest_of(reviewed)]}
    await store.kv.put(dep.cred, json.dumps(record).encode())  # the scope is metadata: no key needed
    _, out = await dep.run(ALICE, {"path": "team_a/reviewed"})
    assert out["status"] == "success", out
    async with dep.http(ALICE) as alice:
        assert (await alice.post("/api/catalog", json={"playbook": rewritten})).status_code == 201
    code, out = await dep.run(ALICE, {"path": "team_a/reviewed"})  # latest is now the rewrite
    assert code == 400 and out["error"]["kind"] == "credential_out_of_scope", out
    async with dep.http(ALICE) as alice, dep.http(BOB) as bob:  # its namespace sees why; others do not
        r = await alice.get(f"/api/executions/{out['execution_id']}")
        assert r.status_code == 200 and r.json()["error"]["kind"] == "credential_out_of_scope", r.text
        assert (await bob.get(f"/api/executions/{out['execution_id']}")).status_code == 404
    assert "-".join(dep.secret) not in json.dumps(await dep.all_events())
