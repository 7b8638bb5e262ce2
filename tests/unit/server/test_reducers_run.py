"""A value a reducer cannot take fails the loop with ``reducer_type`` (SEMANTICS §20), server and
worker on the in-memory bus."""

from __future__ import annotations

import uuid

from noetl.client.run import run_and_wait

WRONG_TYPE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: reducer_type}
workflow:
  - step: start
    loop:
      in: [1, "two", 3]
      iterator: n
      spec: {mode: parallel, policy: {reducers: {total: sum}}}
    tool:
      - name: t
        kind: noop
        spec: {policy: {rules: [{else: {then: {set_ctx: {total: "{{ iter.n }}"}}}}]}}
"""


async def test_a_value_a_reducer_cannot_take_fails_the_loop_with_reducer_type(bus, services) -> None:
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": WRONG_TYPE}, timeout=30)
    assert out["status"] == "failed"
    assert out["error"]["kind"] == "reducer_type" and "'total'" in out["error"]["message"]
    assert out["ctx"] == {"total": 4}
