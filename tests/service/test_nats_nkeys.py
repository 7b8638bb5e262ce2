"""nkey authentication (issue 30): with `noetl-jetstream[nkeys]` installed, a process given
NOETL_NATS_NKEY_SEED signs the server's nonce and runs executions; without the package it is
refused in one line naming the extra (nats-py imports nkeys only when it signs, and used to fail
with ModuleNotFoundError inside the connect)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from noetl.client.run import run_and_wait
from noetl.dsl.errors import DeploymentError
from noetl.events.bus import connect
from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import NatsServer
from tests.support import running

nkeys = pytest.importorskip("nkeys", reason="the nkeys extra: pip install '.[nkeys]'")

ONE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: nkeyed, path: tests/nkeyed}
workflow:
  - step: start
    tool: {kind: noop, result: signed}
"""


def _user(tmp: Path) -> tuple[Path, str]:
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER)
    public = nkeys.from_seed(bytearray(seed)).public_key.decode()
    path = tmp / "user.nk"
    path.write_bytes(seed)
    return path, public


async def test_an_nkey_seed_authenticates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seed_file, public = _user(tmp_path)
    conf = tmp_path / "auth.conf"
    conf.write_text(f"authorization {{ users: [ {{ nkey: {public} }} ] }}\n")
    monkeypatch.delenv("NOETL_NATS_SYNC_INTERVAL", raising=False)
    with NatsServer(extra_args=["-c", str(conf)]) as ns:
        monkeypatch.setenv("NOETL_NATS_NKEY_SEED", str(seed_file))
        nc = await connect(ns.url, name="nkey-test", max_reconnect_attempts=0)
        try:
            async with running(NatsBus(nc)):
                out = await run_and_wait(
                    NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ONE}, timeout=30
                )
        finally:
            await nc.close()
    assert out["status"] == "success" and out["result"] == "signed"


async def test_without_the_nkeys_package_the_refusal_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "nkeys" else real(name, *a)
    )
    monkeypatch.setenv("NOETL_NATS_CREDS", str(tmp_path / "user.creds"))
    with pytest.raises(
        DeploymentError, match=r"NOETL_NATS_CREDS is set but the nkeys package is missing: .*\[nkeys\]"
    ):
        await connect("nats://127.0.0.1:1", name="x", max_reconnect_attempts=0)
