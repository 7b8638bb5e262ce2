"""Authoring sugar on real JetStream: the sugar file, its compiled output and a hand-written
canonical equivalent run to the same result (SEMANTICS §21)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
