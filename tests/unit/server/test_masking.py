"""Masking through a real server and worker (on the in-memory bus): the secret is hidden in every
event, the rest of the entry is not rewritten (issue: say no early, never rewrite data)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from noetl.client.run import run_and_wait
from noetl.events.bus import read_execution_events
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: mask, path: tests/mask}
keychain: [{name: CRED, kind: postgres_credential}]
workflow:
  - step: start
    tool:
      kind: python
      args: {pw: "{{ keychain.CRED.password }}", user: "{{ keychain.CRED.user }}"}
      code: |
        def main(pw, user):
            return {"table": "table_postgres_jsonb", "echo": "pw=" + pw, "user": user}
    next:
      arcs:
        - step: route
          when: "{{ event.result.table == 'table_postgres_jsonb' }}"
          args: {table: "{{ event.result.table }}", sql: "INSERT INTO public.{{ event.result.table }}_test"}
  - step: route
    tool: {kind: noop, result: "{{ args }}"}
"""


async def test_non_secret_fields_route_and_compute_and_the_password_is_masked(bus: Any) -> None:
    creds = await CredentialStore.open(bus, generate_key())
    name, password = f"pg_{uuid.uuid4().hex[:6]}", "Pa55-" + uuid.uuid4().hex[:10]
    data = {"host": "localhost", "user": "postgres", "password": password, "database": "test"}
    await creds.put(name, "postgres_credential", data, {"paths": ["*"], "inline": True})
    server, worker = Server(bus, credentials=creds), Worker(bus, concurrency=4, credentials=creds)
    await server.start()
    await worker.start()
    try:
        request = {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK.replace("CRED", name)}
        out = await run_and_wait(bus, request, timeout=30)
        events = await read_execution_events(bus, out["execution_id"])
    finally:
        await worker.stop(drain=False)
        await server.stop()
    # the arc fired on the unmasked table name, and the SQL built from it is intact
    assert out["status"] == "success", out
    assert out["result"] == {
        "table": "table_postgres_jsonb",
        "sql": "INSERT INTO public.table_postgres_jsonb_test",
    }, out["result"]
    raw = json.dumps(events)
    assert password not in raw, "the password reached NOETL_EVENTS"
    assert '"pw=***"' in raw and '"user": "postgres"' in raw
