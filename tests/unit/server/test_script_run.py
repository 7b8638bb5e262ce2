"""`kind: script` through a real server and worker on the in-memory bus (SEMANTICS §22): its
result routes like any task's, a non-zero exit is seen by the task policy, and what it prints
is masked like every other value."""

from __future__ import annotations

import json
import uuid
from typing import Any

from noetl.client.run import run_and_wait
from noetl.events.bus import read_execution_events
from noetl.store.credentials import CredentialStore, generate_key
from tests.support import running

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: script_run, path: tests/script_run}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool:
      - name: count
        kind: script
        command: ["sh", "-c", "echo '{\\"rows\\": 3}'; echo token=$TOKEN >&2"]
        env: {TOKEN: "{{ keychain.CRED.value }}"}
      - name: fails
        kind: script
        script: |
          echo "bad input" >&2
          exit 4
        spec:
          policy:
            rules:
              - when: "{{ outcome.status == 'error' and outcome.result.exit_code == 4 }}"
                then: {do: continue, set_ctx: {code: "{{ outcome.result.exit_code }}"}}
      - name: done
        kind: noop
        result: "{{ count.json.rows }}"
"""


async def test_a_script_task_runs_routes_and_is_masked(bus: Any) -> None:
    creds = await CredentialStore.open(bus, generate_key())
    name, secret = f"c_{uuid.uuid4().hex[:6]}", "sEcr3t-" + uuid.uuid4().hex[:10]
    await creds.put(name, "secret", {"value": secret}, {"paths": ["*"], "inline": True})
    async with running(bus, credentials=creds):
        request = {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK.replace("CRED", name)}
        out = await run_and_wait(bus, request, timeout=30)
        events = await read_execution_events(bus, out["execution_id"])
    assert out["status"] == "success", out.get("error")
    assert out["result"] == 3 and out["ctx"] == {"code": 4}
    raw = json.dumps(events)
    assert secret not in raw and "token=***" in raw
    failed = [e for e in events if e["name"] == "task.done" and e["payload"]["task"] == "fails"]
    assert failed[0]["payload"]["outcome"]["error"]["kind"] == "script_error"
    assert "bad input" in failed[0]["payload"]["outcome"]["error"]["message"]
