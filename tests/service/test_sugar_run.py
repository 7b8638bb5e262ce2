"""Authoring sugar on real JetStream: the sugar file, its compiled output and a hand-written
canonical equivalent run to the same result (SEMANTICS §21)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from noetl.client.run import run_and_wait
from noetl.dsl.sugar import compile_text, render

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "sugar.yaml"
HAND = ROOT / "tests" / "fixtures" / "sugar" / "hand_written.yaml"
EXPECTED = [
    {"status": 404, "rows": [], "polls": 0},
    {"status": 200, "rows": ["page 1", "page 2", "page 3"], "polls": 0},
    {"status": 500, "rows": [], "polls": 2},
]


def test_noetl_run_of_the_sugar_example() -> None:
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", str(EXAMPLE), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["status"] == "success" and out["result"] == EXPECTED
    labels = [e["payload"]["task"] for e in out["events"] if e["name"] == "task.done"]
    # the events name the generated labels: the same in every run of the file
    assert labels[:6] == ["init", "route", "route.0", "not_found", "route.0.exit", "route.end"]


async def _run(nc: Any, text: str) -> dict[str, Any]:
    return await run_and_wait(nc, {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)


async def test_compiled_output_and_hand_written_canonical_run_the_same(nc, services) -> None:  # type: ignore[no-untyped-def]
    compiled = render(compile_text(EXAMPLE.read_text(), str(EXAMPLE)), str(EXAMPLE))
    results = [await _run(nc, text) for text in (EXAMPLE.read_text(), compiled, HAND.read_text())]
    assert [r["status"] for r in results] == ["success"] * 3
    assert [r["result"] for r in results] == [EXPECTED] * 3
