"""Item 4 of issue 26, the NATS side: the chart's rendered ``authorization`` block, loaded into a
real nats-server, leaves a principal's raw NATS client no more rights than its principal.

Before: any client of the default nats-server could publish on ``noetl.requests.*``, write the
catalog's and the credentials' KV buckets and read every event."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.events.bus import connect
from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import NatsServer
from noetl.server.api.launch import start_operations
from noetl.server.service import Server
from noetl.store.catalog import Catalog
from noetl.store.credentials import generate_key
from noetl.worker.service import Worker

helm = pytest.importorskip("helm_python", reason="the chart renders with the `helm` extra")

from tests.helm.chart import manifests, render  # noqa: E402

SVC_PW, ALICE_PW, ROOT_PW = (f"{w}-pw-{uuid.uuid4().hex}" for w in ("svc", "alice", "root"))
ALICE_TOKEN, ROOT_TOKEN = "alice-" + uuid.uuid4().hex, "root-" + uuid.uuid4().hex

HELLO = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hello, path: team_a/hello}
workflow:
  - step: start
    tool: {kind: noop, result: hi}
"""


def _rendered() -> tuple[str, str]:
    """(authorization.conf, auth.yaml) as the chart renders them."""
    values = {
        "nats": {"auth": {"user": "noetl", "password": SVC_PW}},
        "auth": {
            "principals": [
                {"name": "root", "token": ROOT_TOKEN, "role": "admin", "natsPassword": ROOT_PW},
                {"name": "alice", "token": ALICE_TOKEN, "role": "operator", "namespaces": ["team_a"],
                 "natsPassword": ALICE_PW},
            ],
            "natsAuthorization": {"enabled": True},
        },
    }
    docs = manifests(render(values))
    secrets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"}
    conf = secrets["noetl-nats-authorization"]["stringData"]["authorization.conf"]
    auth = base64.b64decode(secrets["noetl"]["data"]["auth.yaml"]).decode()
    assert "natsPassword" not in auth and ALICE_PW not in auth
    return conf, auth


@pytest.fixture
async def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[dict[str, Any]]:
    conf, auth = _rendered()
    (tmp_path / "nats.conf").write_text(conf)
    (tmp_path / "auth.yaml").write_text(auth)
    with NatsServer(extra_args=["-c", str(tmp_path / "nats.conf")]) as ns:
        monkeypatch.setenv("NOETL_NATS_USER", "noetl")
        monkeypatch.setenv("NOETL_NATS_PASSWORD", SVC_PW)
        monkeypatch.setenv("NOETL_AUTH_FILE", str(tmp_path / "auth.yaml"))
        monkeypatch.setenv("NOETL_CREDENTIALS_KEY", generate_key())
        nc = await connect(ns.url, name="noetl-service")
        server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=2)
        await server.start()
        await worker.start()
        ops = await start_operations(NatsBus(nc), "server", server, http_port=-1)
        await Catalog.open(NatsBus(nc))
        await (await Catalog.open(NatsBus(nc))).register(HELLO)
        monkeypatch.delenv("NOETL_NATS_USER")
        monkeypatch.delenv("NOETL_NATS_PASSWORD")
        try:
            yield {"url": ns.url, "nc": nc}
        finally:
            await ops.stop()
            await worker.stop(drain=False)
            await server.stop()
            await nc.close()


async def _as(url: str, user: str, password: str) -> Any:
    return await connect(url, name=user, user=user, password=password, inbox_prefix=f"_INBOX_{user}",
                         max_reconnect_attempts=0)


async def test_a_principals_nats_user_reaches_only_the_checked_service(secured: dict[str, Any]) -> None:
    alice = await _as(secured["url"], "alice", ALICE_PW)
    try:
        # the NATS service, with alice's token, in alice's namespace: allowed
        msg = await alice.request("noetl.api.execute", json.dumps({"path": "team_a/hello"}).encode(),
                                  timeout=10, headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
        assert "execution_id" in json.loads(msg.data), msg.data
        # the request stream itself, the catalog's KV and the event log: refused by nats-server
        seen: list[Any] = []

        async def got(m: Any) -> None:
            seen.append(m)

        await alice.subscribe("noetl.events.>", cb=got)
        with pytest.raises(Exception):  # noqa: B017  (a permissions violation or no ack)
            await alice.jetstream().publish(
                "noetl.requests.execute", json.dumps({"path": "team_a/hello"}).encode(), timeout=2
            )
        with pytest.raises(Exception):  # noqa: B017
            kv = await alice.jetstream().key_value("noetl_catalog")
            await kv.put("path.team_a/hello.latest", b"{}")
        with pytest.raises(Exception):  # noqa: B017
            await alice.jetstream().key_value("noetl_credentials")
        await alice.flush()
        msg = await alice.request("noetl.api.execute", json.dumps({"path": "team_a/hello"}).encode(),
                                  timeout=10, headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
        await asyncio.sleep(0.5)
        assert seen == [], "alice's NATS user may not read the event log"
    finally:
        await alice.close()
    # the chart's own user and an admin's may
    root = await _as(secured["url"], "root", ROOT_PW)
    try:
        assert await root.jetstream().key_value("noetl_catalog") is not None
    finally:
        await root.close()
    text = await (await Catalog.open(NatsBus(secured["nc"]))).get("team_a/hello")
    assert text == HELLO
    _ = yaml  # the auth file is YAML; parsed by the server


async def test_the_cli_as_a_principal(
    secured: dict[str, Any], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """`NOETL_TOKEN` makes the CLI act as its principal, through the checked NATS service: what a
    principal's NATS user can reach at all."""
    from noetl.cli.main import build_parser

    alice = await _as(secured["url"], "alice", ALICE_PW)

    async def cli(*argv: str) -> tuple[int, str, str]:
        args = build_parser().parse_args([*argv, "--nats-url", "nats://unused"])
        rc = await args.afn(alice, args)
        out = capsys.readouterr()
        return rc, out.out, out.err

    monkeypatch.setenv("NOETL_TOKEN", ALICE_TOKEN)
    try:
        from noetl.client.run import Awaited  # noqa: F401  (not used: alice may not read events)

        msg = await alice.request("noetl.api.execute", json.dumps({"path": "team_a/hello"}).encode(),
                                  timeout=10, headers={"Authorization": f"Bearer {ALICE_TOKEN}"})
        eid = json.loads(msg.data)["execution_id"]
        rc, out, err = await cli("status", eid, "--json")
        assert rc == 0 and json.loads(out)["path"] == "team_a/hello", err
        rc, out, err = await cli("cancel", eid)
        assert rc == 0, err
        rc, out, err = await cli("signal", eid, "go")
        assert rc in (0, 2), err  # running or finished; either way an answer, never a NATS error
        monkeypatch.setenv("NOETL_TOKEN", "nobody-" + uuid.uuid4().hex)
        rc, out, err = await cli("status", eid)
        assert rc == 2 and "unauthorized" in err, err
    finally:
        await alice.close()


async def test_noetl_exec_as_a_principal(secured: dict[str, Any]) -> None:
    """`noetl exec --wait` from alice's NATS user: started and followed through the service;
    another namespace's playbook is refused."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NOETL_NATS_USER": "alice", "NOETL_NATS_PASSWORD": ALICE_PW,
           "NOETL_NATS_INBOX_PREFIX": "_INBOX_alice", "NOETL_TOKEN": ALICE_TOKEN}

    async def noetl(*argv: str) -> subprocess.CompletedProcess[str]:  # the services run on this loop
        cmd = [sys.executable, "-m", "noetl.cli.main", *argv, "--nats-url", secured["url"]]
        run = subprocess.run
        return await asyncio.to_thread(run, cmd, capture_output=True, text=True, timeout=60, env=env)

    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(HELLO.replace("team_a/hello", "team_a/hello2").replace("result: hi", "result: hi2"))
    registered = await noetl("catalog", "register", f.name)
    assert registered.returncode == 0, registered.stderr
    assert json.loads(registered.stdout)["principal"]["name"] == "alice"
    again = await noetl("catalog", "register", f.name)  # the same text again: idempotent
    assert again.returncode == 0, again.stderr
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as g:
        g.write(HELLO.replace("team_a/hello", "team_b/hello"))
    refused = await noetl("catalog", "register", g.name)
    assert refused.returncode == 2 and "forbidden" in refused.stderr, refused.stderr
    listed = await noetl("catalog", "list")
    assert "team_a/hello2" in listed.stdout and "team_b" not in listed.stdout, listed
    scheduled = await noetl("schedule", "add", "nightly", "--path", "team_a/hello2", "--cron", "0 3 * * *")
    assert scheduled.returncode == 0 and json.loads(scheduled.stdout)["principal"] == "alice", scheduled
    refused = await noetl("schedule", "add", "theirs", "--path", "team_b/hello", "--cron", "0 3 * * *")
    assert refused.returncode == 2 and "forbidden" in refused.stderr, refused.stderr
    assert (await noetl("schedule", "delete", "nightly")).returncode == 0

    done = await noetl("exec", "--path", "team_a/hello", "--wait", "--json", "--timeout", "20")
    assert done.returncode == 0 and json.loads(done.stdout)["status"] == "success", done.stderr
    refused = await noetl("exec", "--path", "team_b/anything")
    assert refused.returncode == 2 and "forbidden" in refused.stderr, refused.stderr
    # noetl rerun plans and starts through noetl.api.rerun: alice's NATS user reads no events
    eid = json.loads(done.stdout)["execution_id"]
    planned = await noetl("rerun", eid, "--from", "start", "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["from_steps"] == ["start"] and "execution_id" not in plan, plan
    rerun = await noetl("rerun", eid, "--from", "start", "--json")
    assert rerun.returncode == 0 and json.loads(rerun.stdout)["execution_id"] != eid, rerun.stderr


async def test_the_cli_reads_and_manages_credentials_as_a_principal(secured: dict[str, Any]) -> None:
    """`noetl events`, `logs`, `executions`, `catalog show` and `credentials` with `NOETL_TOKEN`
    go through the checked NATS service: from alice's NATS user (which may not read a stream or a
    bucket) they work in team_a, show nothing of team_b, and a credential write is an admin's,
    audited under the principal's name. Before, each of them read the streams and buckets itself
    and failed for alice's NATS user, or, for a user with wider NATS rights, saw every namespace."""
    import os
    import subprocess
    import sys

    from noetl.store.audit import AUDIT_STREAM

    catalog = await Catalog.open(NatsBus(secured["nc"]))
    await catalog.register(HELLO.replace("team_a/hello", "team_b/hello"))
    root = await _as(secured["url"], "root", ROOT_PW)
    try:
        started = {}
        for token, path in ((ROOT_TOKEN, "team_b/hello"), (ALICE_TOKEN, "team_a/hello")):
            msg = await root.request("noetl.api.execute", json.dumps({"path": path}).encode(), timeout=10,
                                     headers={"Authorization": f"Bearer {token}"})
            started[path] = json.loads(msg.data)["execution_id"]
    finally:
        await root.close()

    def env(user: str, password: str, token: str) -> dict[str, str]:
        return {**os.environ, "NOETL_NATS_USER": user, "NOETL_NATS_PASSWORD": password,
                "NOETL_NATS_INBOX_PREFIX": f"_INBOX_{user}", "NOETL_TOKEN": token}

    async def noetl(who: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "noetl.cli.main", *argv, "--nats-url", secured["url"]]
        run = subprocess.run
        return await asyncio.to_thread(run, cmd, capture_output=True, text=True, timeout=60, env=who)

    alice, admin = env("alice", ALICE_PW, ALICE_TOKEN), env("root", ROOT_PW, ROOT_TOKEN)
    mine, theirs = started["team_a/hello"], started["team_b/hello"]
    got = await noetl(alice, "events", mine, "--follow", "--json", "--timeout", "30")
    names = [json.loads(line)["name"] for line in got.stdout.splitlines()]
    assert got.returncode == 0 and names[0] == "playbook.execution.requested", got.stderr
    assert names[-1] == "playbook.processed", names
    got = await noetl(alice, "events", theirs)
    assert got.returncode == 1 and "not_found" in got.stderr and not got.stdout, got
    got = await noetl(alice, "logs", theirs)
    assert got.returncode == 2 and "not_found" in got.stderr, got
    assert (await noetl(alice, "logs", mine, "--json")).returncode == 0
    listed = await noetl(alice, "executions", "--json")
    ids = [e["execution_id"] for e in json.loads(listed.stdout)["executions"]]
    assert listed.returncode == 0 and mine in ids and theirs not in ids, (listed.stderr, ids, theirs)
    shown = await noetl(alice, "catalog", "show", "team_a/hello")
    assert shown.returncode == 0 and "team_a/hello" in shown.stdout, shown.stderr
    shown = await noetl(alice, "catalog", "show", "team_b/hello")
    assert shown.returncode == 1 and "team_b" not in shown.stdout, shown

    secret = ["--data", json.dumps({"token": "t0k-" + uuid.uuid4().hex})]
    refused = await noetl(alice, "credentials", "set", "stolen", "--kind", "bearer", *secret)
    assert refused.returncode == 2 and "forbidden" in refused.stderr, refused
    stored = await noetl(admin, "credentials", "set", "api_token", "--kind", "bearer", *secret)
    assert stored.returncode == 0 and json.loads(stored.stdout)["stored"] is True, stored.stderr
    listed = await noetl(alice, "credentials", "list")
    assert listed.returncode == 0 and listed.stdout.split() == ["api_token", "bearer"], listed
    assert (await noetl(alice, "credentials", "delete", "api_token")).returncode == 2
    assert (await noetl(admin, "credentials", "delete", "api_token")).returncode == 0
    js = secured["nc"].jetstream()
    records = []
    info = await js.stream_info(AUDIT_STREAM)
    sub = await js.pull_subscribe("noetl.audit.credentials", stream=AUDIT_STREAM)
    for m in await sub.fetch(info.state.messages, timeout=5):
        records.append(json.loads(m.data))
    seen = [(r.get("action"), r.get("who"), r.get("outcome")) for r in records]
    assert ("credential.put", "alice", "denied") in seen, seen
    assert ("credential.put", "root", "stored") in seen, seen
    assert ("credential.delete", "root", "deleted") in seen, seen
