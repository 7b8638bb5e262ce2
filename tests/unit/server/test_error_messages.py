"""Run-time errors say where they happened and what was there, server and worker on the in-memory
bus: a python task's failing line with its code, an undefined template name with the names that
are defined (names, never values) on the worker and on the server, and `noetl run`/`noetl status`
printing the playbook line."""

from __future__ import annotations

import uuid
from typing import Any

from noetl.cli.output import summary
from noetl.client.run import run_and_wait
from noetl.server.api.queries import execution_status


async def _run(bus: Any, text: str) -> dict[str, Any]:
    return await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)


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


async def test_python_error_names_task_step_line_and_code(bus, services) -> None:
    out = await _run(bus, PY_FAILS)
    assert out["status"] == "failed"
    err = out["error"]
    assert err["kind"] == "python_error"  # arcs route on the kind: unchanged
    assert err["message"] == (
        "KeyError: 'amount' (task 'compute' of step 'start', line 3 of the task's "
        "code: total = row['amount'] * price)"
    )
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
    status = await execution_status(bus, out["execution_id"])
    assert status is not None
    assert f"  at line {err['playbook_line']} of playbook tests/py_fails" in summary(status)


ITER_UNDEFINED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: iter_undefined}
workload: {items: [1, 2]}
workflow:
  - step: start
    loop: {in: "{{ workload.items }}", iterator: n}
    tool:
      - name: show
        kind: noop
        result:
          value: "{{ iter.num }}"
"""


async def test_undefined_iter_attribute_lists_what_iter_has(bus, services) -> None:
    out = await _run(bus, ITER_UNDEFINED)
    assert out["status"] == "failed"
    err = out["error"]
    assert err["kind"] == "template_error"
    assert err["message"] == (
        "'iter.num' is undefined (iter has: index, n) in workflow[0].tool[0].result.value"
    )
    shown = summary(out, "iter_undefined.yaml", ITER_UNDEFINED)
    line = ITER_UNDEFINED.splitlines().index('          value: "{{ iter.num }}"') + 1
    assert f"\n  at iter_undefined.yaml:{line}" in shown


async def test_undefined_top_level_name_lists_the_namespaces_never_values(bus, services) -> None:
    text = ITER_UNDEFINED.replace("{{ iter.num }}", "{{ itr.num }}")
    out = await _run(bus, text)
    message = out["error"]["message"]
    assert message == (
        "'itr.num' is undefined (itr is undefined; defined here: args, ctx, execution_id, "
        "iter, keychain, workload, _attempt, _prev, _task) in "
        "workflow[0].tool[0].result.value"
    )
    # on the server too: an arc's args see event, not iter
    routed = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: arc_undefined}
workload: {token: s3cr3t-value}
workflow:
  - step: start
    tool: {kind: noop, result: 1}
    next: {arcs: [{step: after, args: {x: "{{ event.result.total }}"}}]}
  - step: after
    tool: {kind: noop}
"""
    out = await _run(bus, routed)
    message = out["error"]["message"]
    assert message == (
        "'event.result.total' is undefined (event.result is an int, not a mapping) in "
        "workflow[0].next.arcs[0].args.x"
    )
    assert "s3cr3t" not in message
