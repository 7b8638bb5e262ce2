"""Run-time errors say where they happened, through a real server and worker (real nats-server): a
python task's failing line with its code, and `noetl run`/`noetl status` printing the playbook
line (undefined template names: tests/unit/server/test_error_messages.py)."""

from __future__ import annotations

import uuid
from typing import Any

from noetl.cli.output import summary
from noetl.client.run import run_and_wait
from noetl.server.api.queries import execution_status

PY_FAILS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: py_fails, path: tests/py_fails}
workflow:
  - step: start
    tool:
      - name: compute
        kind: python
        args: {row: {price: 3}}
        code: |
          def main(row):
              price = row['price']
              total = row['amount'] * price
              return total
"""


async def _run(nc: Any, text: str) -> dict[str, Any]:
    return await run_and_wait(nc, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)


async def test_python_error_names_task_step_line_and_code(nc, services) -> None:  # type: ignore[no-untyped-def]
    out = await _run(nc, PY_FAILS)
    assert out["status"] == "failed"
    err = out["error"]
    assert err["kind"] == "python_error"  # arcs route on the kind: unchanged
    assert err["message"] == ("KeyError: 'amount' (task 'compute' of step 'start', line 3 of the task's "
                              "code: total = row['amount'] * price)")
    assert err["line"] == 3
    lines = PY_FAILS.splitlines()
    assert lines[err["playbook_line"] - 1].strip() == "total = row['amount'] * price"
    failed = next(e for e in out["events"] if e["name"] == "step.failed")
    assert failed["payload"]["error"] == err
    task_done = next(e for e in out["events"] if e["name"] == "task.done")
    assert task_done["payload"]["outcome"]["py"] == {"exception_type": "KeyError", "line": 3}
    # `noetl run FILE` names the file and line; `noetl status` the catalog path and line
    shown = summary(out, "py_fails.yaml", PY_FAILS)
    assert f"error: python_error: {err['message']}\n  at py_fails.yaml:{err['playbook_line']}" in shown
    status = await execution_status(nc.jetstream(), out["execution_id"])
    assert status is not None
    assert f"  at line {err['playbook_line']} of playbook tests/py_fails" in summary(status)


