"""Playbooks that once wedged a partition: each now fails on its own with a clear kind, and the
execution right after it succeeds; server and worker on the in-memory bus (the requests that
must be refused on the wire are in tests/service/test_poison_requests.py)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from tests.service.test_poison_requests import BOMB, CYCLE, OK, _with_pool


async def _next_one_succeeds(bus: Any) -> None:
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": OK}, timeout=20)
    assert out["status"] == "success" and out["result"] == 7, out


@pytest.mark.parametrize("pool", ["a b", "*", ">", "a.b", ""])
async def test_a_pool_that_is_no_subject_token_is_refused_at_the_request(
    bus: Any, services: Any, pool: str
) -> None:
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": _with_pool(pool)}, timeout=20)
    assert out["status"] == "failed" and out["error"]["kind"] == "playbook_invalid", out
    assert "spec.pool" in json.dumps(out["error"]), out["error"]
    await _next_one_succeeds(bus)


@pytest.mark.parametrize(("playbook", "kind"), [(BOMB, "template_error"), (CYCLE, "step_run_limit")])
async def test_a_runaway_playbook_ends_with_its_kind_and_the_next_one_runs(
    bus: Any, services: Any, playbook: str, kind: str
) -> None:
    """Before: the template held the server's decision loop for 19 s; the cycle never ended."""
    out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": playbook}, timeout=30)
    assert out["status"] == "failed" and out["error"]["kind"] == kind, out["error"]
    await _next_one_succeeds(bus)
