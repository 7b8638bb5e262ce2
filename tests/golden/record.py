"""Record golden histories: real executions' event logs, replayed by test_golden.py.

    .venv/bin/python -m tests.golden.record

Run it (and review the diff) only when a change to the engine's decisions is intended.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from noetl.cli.embedded import run_embedded

HERE = Path(__file__).resolve().parent
SOURCES = {
    "hello": HERE.parents[1] / "examples" / "hello.yaml",
    "admit_join": HERE / "playbooks" / "admit_join.yaml",
    "loop_best_effort": HERE / "playbooks" / "loop_best_effort.yaml",
    "routing_failure": HERE / "playbooks" / "routing_failure.yaml",
}


async def record() -> None:
    for name, src in SOURCES.items():
        out = await run_embedded(src.read_text(), str(src), {}, credentials_file=None, catalog_dir=None)
        (HERE / f"{name}.json").write_text(json.dumps(out["events"], indent=1, sort_keys=True) + "\n")
        print(f"{name}: {out['status']}, {len(out['events'])} events")


if __name__ == "__main__":
    asyncio.run(record())
