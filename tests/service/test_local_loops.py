"""``exec: local`` through ``noetl run`` (embedded nats-server); the loop's behaviour is in
tests/unit/server/test_local_loops.py."""

from __future__ import annotations


def test_noetl_run_of_the_local_loop_example() -> None:
    """docs/examples/loop_local.yaml through `noetl run` (embedded nats-server): 1 000 iterations
    on one worker, summed in ctx by a reducer."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", "docs/examples/loop_local.yaml", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["result"] == {"iterations": 1000, "sum_of_squares": sum(i * i for i in range(1000))}
    assert sum(e["name"] == "loop.iteration.done" for e in out["events"]) == 1000
