"""The keychain declaration's `kind` is checked against the stored entry's when the execution
starts (``keychain_kind_mismatch``) and is what masking follows (issue 27)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from noetl.client.run import run_and_wait
from noetl.dsl.cache import parse_playbook
from noetl.events.bus import read_execution_events
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker
from tests.support import running

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: kinds, path: tests/kinds}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool: {kind: noop, result: "{{ keychain.CRED.code }}"}
"""


async def test_a_declared_kind_that_is_not_the_stored_one_stops_the_execution_before_any_step(
    bus: Any,
) -> None:
    creds = await CredentialStore.open(bus, generate_key())
    name, value = f"c_{uuid.uuid4().hex[:6]}", "open-" + uuid.uuid4().hex[:10]
    await creds.put(name, "other", {"code": value}, {"paths": ["*"], "inline": True})
    server, worker = Server(bus, credentials=creds), Worker(bus, concurrency=4, credentials=creds)
    await server.start()
    await worker.start()
    try:
        out = await run_and_wait(
            bus, {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK.replace("CRED", name)}, timeout=30
        )
        events = await read_execution_events(bus, out["execution_id"])
    finally:
        await worker.stop(drain=False)
        await server.stop()
    assert out["status"] == "failed" and out["error"]["kind"] == "keychain_kind_mismatch", out.get("error")
    message = out["error"]["message"]
    assert (
        name in message and "`kind: secret`" in message and "'other'" in message and "keychain[0]" in message
    )
    assert out["error"]["entries"] == [{"name": name, "declared": "secret", "stored": "other"}]
    assert not [e for e in events if e["name"] == "step.started"], "a step ran"
    assert value not in json.dumps(events)


async def test_masking_follows_the_declared_kind(bus: Any) -> None:
    """An entry whose stored kind changed after the start (a rotation) is still masked as the
    playbook declares it: `secret` masks every string, whatever the field is called."""
    value = "open-" + uuid.uuid4().hex[:10]

    class Rotated:
        async def get(self, name: str) -> dict[str, Any]:
            return {"kind": "other", "data": {"code": value}}

    playbook = parse_playbook(PLAYBOOK, "p.yaml")
    async with running(bus, credentials=Rotated()) as (_, worker):
        _, kinds = await worker._keychain(playbook, {"command_id": "c1", "execution_id": "e1"})
    assert kinds == {"CRED": "secret"}
