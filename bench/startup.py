"""``noetl run`` of a one-step playbook as a whole process: what a user waits at the command line.

It includes starting Python and importing the package, a private nats-server, declaring the
streams, one server and one worker, the execution itself and shutting all of it down.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

from bench import playbooks
from bench.config import Sizes
from bench.record import Recorder

NAME = "startup"
NOETL = Path(sys.executable).parent / "noetl"


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="noetl-bench-") as d:
        f = Path(d) / "one_step.yaml"
        f.write_text(playbooks.one_step())
        for _ in range(max(runs, sizes.startup_runs)):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                str(NOETL), "run", str(f), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            _, err = await asyncio.wait_for(proc.communicate(), 120)
            took = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"noetl run exited {proc.returncode}: {err.decode()[-500:]}")
            rec.add(NAME, "noetl_run_wall", took * 1000, "ms")
