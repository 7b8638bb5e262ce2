"""Authoring sugar: the sugar file, its compiled output and a hand-written canonical equivalent
run to the same result (SEMANTICS §21), server and worker on the in-memory bus."""

from __future__ import annotations

import uuid
from typing import Any

from noetl.client.run import run_and_wait
from noetl.dsl.sugar import compile_text, render
from tests.service.test_sugar_run import EXAMPLE, EXPECTED, HAND


async def _run(bus: Any, text: str) -> dict[str, Any]:
    return await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)


async def test_compiled_output_and_hand_written_canonical_run_the_same(bus, services) -> None:
    compiled = render(compile_text(EXAMPLE.read_text(), str(EXAMPLE)), str(EXAMPLE))
    results = [await _run(bus, text) for text in (EXAMPLE.read_text(), compiled, HAND.read_text())]
    assert [r["status"] for r in results] == ["success"] * 3
    assert [r["result"] for r in results] == [EXPECTED] * 3
