"""Reducers on real JetStream (SEMANTICS §20): a parallel loop's ctx writes combined by the server."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from noetl.client.run import run_and_wait

ROOT = Path(__file__).resolve().parents[2]

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


def test_noetl_run_of_the_reducers_example() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", "docs/examples/reducers.yaml", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "success"
    assert out["result"] == {"total": 87, "orders": 3, "range": [12, 45]}
    ctx = out["ctx"]
    assert sorted(ctx["ids"]) == ["a", "b", "c"] and sorted(ctx["tags"]) == ["new", "new", "vip"]
    assert ctx["by_id"] == {"a": 30, "b": 12, "c": 45}


async def test_a_value_a_reducer_cannot_take_fails_the_loop_with_reducer_type(nc, services) -> None:  # type: ignore[no-untyped-def]
    out = await run_and_wait(nc, {"request_id": uuid.uuid4().hex, "playbook": WRONG_TYPE}, timeout=30)
    assert out["status"] == "failed"
    assert out["error"]["kind"] == "reducer_type" and "'total'" in out["error"]["message"]
    assert out["ctx"] == {"total": 4}
