"""``loop.in`` over a referenced result on a real nats-server (JetStream's object store, the
partition consumer reading ``loop.items.read`` back): the cases of
tests/unit/server/test_loop_in_reference.py, which run them on the in-memory bus."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events.nats_port import NatsBus
from noetl.events.objects import is_reference, resolve
from tests.unit.server.test_loop_in_reference import playbook


@pytest.mark.parametrize("exec_", ["distributed", "local"])
async def test_loop_in_over_a_referenced_result_on_nats(nc: Any, services: Any, exec_: str) -> None:
    bus = NatsBus(nc)
    text = playbook(exec_, "list(range(300))")
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=120)
    assert out["status"] == "success", out.get("error")
    assert is_reference(out["steps"]["make"][0]["result"])
    result = out["steps"]["each"][0]["result"]
    assert (await resolve(bus, result) if is_reference(result) else result) == [i * 2 for i in range(300)]


@pytest.mark.parametrize("exec_", ["distributed", "local"])
async def test_a_referenced_non_list_fails_on_nats(nc: Any, services: Any, exec_: str) -> None:
    text = playbook(exec_, "{str(i): i for i in range(300)}")
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=60)
    assert out["status"] == "failed" and out["error"]["kind"] == "loop_in_not_list", out.get("error")
