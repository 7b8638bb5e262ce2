"""Reducers on real JetStream (SEMANTICS §20): a parallel loop's ctx writes combined by the server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
