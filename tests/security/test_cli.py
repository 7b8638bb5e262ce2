"""Item 7 of issue 26, the CLI's part: ``noetl credentials set/delete`` left no audit record and
worked from an anonymous connection."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from noetl.cli.main import build_parser
from noetl.events.bus import connect, read_messages
from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import NatsServer
from noetl.store.audit import AUDIT_STREAM, CREDENTIALS_AUDIT_SUBJECT
from noetl.store.credentials import CredentialStore, generate_key


async def cli(nc: Any, capsys: Any, *argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args([*argv, "--nats-url", "nats://unused"])
    rc = await args.afn(nc, args)
    out = capsys.readouterr()
    return rc, out.out, out.err


async def test_anonymous_credential_writes_are_refused(
    nc: Any, capsys: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NOETL_CREDENTIALS_KEY", generate_key())
    name, secret = f"cli_{uuid.uuid4().hex[:6]}", "sek-" + uuid.uuid4().hex
    store = await CredentialStore.open(NatsBus(nc))
    await store.put(name, "secret", {"value": secret})
    rc, _, err = await cli(nc, capsys, "credentials", "delete", name)
    assert rc == 2 and "anonymous" in err
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", json.dumps({"value": "x" * 20}))
    assert rc == 2 and "anonymous" in err
    assert (await store.get(name)) == {"kind": "secret", "data": {"value": secret}}
    weak = '{"value": "2026"}'
    rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", weak, "--anonymous")
    assert rc == 2 and "2026" not in err and "characters" in err


async def test_credential_writes_name_their_nats_user(capsys: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_CREDENTIALS_KEY", generate_key())
    password = "ops-pw-" + uuid.uuid4().hex
    with NatsServer(extra_args=["--user", "ops", "--pass", password]) as ns:
        monkeypatch.setenv("NOETL_NATS_USER", "ops")
        monkeypatch.setenv("NOETL_NATS_PASSWORD", password)
        nc = await connect(ns.url)
        try:
            name, secret = f"cli_{uuid.uuid4().hex[:6]}", "sek-" + uuid.uuid4().hex
            data = json.dumps({"value": secret})
            rc, out, err = await cli(nc, capsys, "credentials", "set", name, "--data", data)
            assert rc == 0 and secret not in out + err, err
            rc, _, err = await cli(nc, capsys, "credentials", "delete", name)
            assert rc == 0, err
            stored = await read_messages(NatsBus(nc), AUDIT_STREAM, [CREDENTIALS_AUDIT_SUBJECT])
            records = [r for _, r in stored]
            mine = [(r["action"], r["who"]) for r in records if r["credential"] == name]
            assert mine == [("credential.put", "nats-user:ops"), ("credential.delete", "nats-user:ops")], mine
            assert secret not in json.dumps(records)
        finally:
            await nc.close()


async def test_the_cli_cannot_replace_a_registered_version(nats_server: Any, tmp_path: Any) -> None:
    """Before: `noetl catalog register` replaced an admin's pinned version with other text."""
    import subprocess
    import sys

    path = f"team_a/pinned_{uuid.uuid4().hex[:6]}"
    first, other = tmp_path / "v1.yaml", tmp_path / "v1b.yaml"
    text = f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: pinned, path: {path}, version: "1"}}
workflow:
  - step: start
    tool: {{kind: noop, result: reviewed}}
"""
    first.write_text(text)
    other.write_text(text.replace("reviewed", "rewritten"))

    def noetl(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "noetl.cli.main", *argv, "--nats-url", nats_server.url],
                              capture_output=True, text=True, timeout=60)

    done = noetl("catalog", "register", str(first))
    assert done.returncode == 0 and json.loads(done.stdout)["principal"]["role"] == "nats", done.stderr
    again = noetl("catalog", "register", str(other))
    assert again.returncode == 2 and "never replaced" in again.stderr, again.stderr
    shown = noetl("catalog", "show", path, "--version", "1")
    assert "reviewed" in shown.stdout and "rewritten" not in shown.stdout, shown
