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
