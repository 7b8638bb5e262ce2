"""``loop.in`` over a previous step's result that travelled by reference (SEMANTICS §11), server
and worker on the in-memory bus: the server reads the object once and loops over it, in both
placements (SEMANTICS §21), with the same results."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events.objects import is_reference, resolve


def playbook(exec_: str, produce: str) -> str:
    """``make`` returns ``produce``; a payload limit of 1 KiB sends anything longer by reference."""
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop_ref, path: tests/loop_ref}}
executor: {{spec: {{policy: {{limits: {{max_payload_bytes: 1024}}}}}}}}
workflow:
  - step: start
    next: {{arcs: [{{step: make}}]}}
  - step: make
    tool:
      - name: produce
        kind: python
        code: |
          def main():
              return {produce}
    next: {{arcs: [{{step: each}}]}}
  - step: each
    loop:
      in: "{{{{ event.result }}}}"
      iterator: item
      spec: {{mode: parallel, max_in_flight: 8, policy: {{exec: {exec_}}}}}
    tool: [{{name: t, kind: noop, result: "{{{{ iter.item * 2 }}}}"}}]
"""


async def _result(bus: Any, value: Any) -> Any:
    return await resolve(bus, value) if is_reference(value) else value


@pytest.mark.parametrize("exec_", ["distributed", "local"])
async def test_loop_in_over_a_referenced_result_loops_over_all_its_items(
    bus: Any, services: Any, exec_: str
) -> None:
    text = playbook(exec_, "list(range(500))")
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=120)
    assert out["status"] == "success", out.get("error")
    assert is_reference(out["steps"]["make"][0]["result"]), "the list did not travel by reference"
    assert await _result(bus, out["steps"]["each"][0]["result"]) == [i * 2 for i in range(500)]
    assert sum(e["name"] == "loop.iteration.done" for e in out["events"]) == 500
    assert sum(e["name"] == "loop.items.read" for e in out["events"]) == 1


@pytest.mark.parametrize("exec_", ["distributed", "local"])
async def test_a_referenced_non_list_fails_with_loop_in_not_list(bus: Any, services: Any, exec_: str) -> None:
    text = playbook(exec_, "{str(i): i for i in range(500)}")
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=60)
    assert out["status"] == "failed"
    err = out["error"]
    assert err["kind"] == "loop_in_not_list", err
    assert "'each'" in err["message"] and "dict, not a list" in err["message"], err["message"]


async def test_a_reference_too_large_to_hold_is_refused_without_reading_it() -> None:
    """The server holds the items in memory: past ``MAX_LOOP_ITEMS_BYTES`` the engine gets the
    reason instead (and fails the step with it), not the object."""
    from noetl.events.memory import MemoryBus
    from noetl.store.catalog import MAX_LOOP_ITEMS_BYTES, Catalog

    bus = MemoryBus()
    ref = {"store": "nats.object", "key": "e/r/result", "size": MAX_LOOP_ITEMS_BYTES + 1, "checksum": "x"}
    ev: Any = {"name": "loop.items.read", "payload": {"ref": ref}}
    out = await (await Catalog.open(bus)).with_playbook_text(ev)
    assert "items" not in out["payload"] and "page the input" in out["payload"]["read_error"]
    await bus.close()


async def test_a_hand_written_reference_reads_no_other_result(bus: Any, services: Any) -> None:
    """A playbook that writes a reference itself (``loop.in`` a mapping shaped like one, naming
    another execution's result) reads nothing: the step fails with ``loop_in_not_list``."""
    first = await run_and_wait(
        bus, {"request_id": uuid.uuid4().hex, "playbook": playbook("distributed", "list(range(500))")},
        timeout=120,
    )
    key = first["steps"]["make"][0]["result"]["key"]
    forged = playbook("distributed", "1").replace(
        '"{{ event.result }}"', "\"{{ {'store': 'nats.object', 'key': '" + key + "'} }}\""
    )
    assert key in forged
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": forged}, timeout=60)
    assert out["status"] == "failed", out.get("result")
    err = out["error"]
    assert err["kind"] == "loop_in_not_list" and "no checksum" in err["message"], err
    assert not any(e["name"] == "loop.iteration.done" for e in out["events"])
