"""Item 7 of issue 26, the CLI's part: ``noetl credentials set/delete`` left no audit record and
worked from an anonymous connection."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from noetl.cli.main import build_parser
from noetl.events.bus import connect, read_messages
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
    store = await CredentialStore.open(nc.jetstream())
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
            stored = await read_messages(nc.jetstream(), AUDIT_STREAM, [CREDENTIALS_AUDIT_SUBJECT])
            records = [r for _, r in stored]
            mine = [(r["action"], r["who"]) for r in records if r["credential"] == name]
            assert mine == [("credential.put", "nats-user:ops"), ("credential.delete", "nats-user:ops")], mine
            assert secret not in json.dumps(records)
        finally:
            await nc.close()
