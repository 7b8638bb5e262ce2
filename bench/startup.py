"""``noetl run`` of a one-step playbook as a whole process: what a user waits at the command line.

It includes starting Python and importing the package, a private nats-server, declaring the
streams, one server and one worker, the execution itself and shutting all of it down. Its floor,
interleaved run by run, is the least any such command could do: a Python process that starts a
private nats-server with JetStream, imports nats-py, connects, publishes one message with an
ack to a stream and stops the server (``floor_wall``).
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
FLOOR = """
import asyncio, os, sys
from noetl.host.natsserver import NatsServer
async def main(url):
    import nats
    nc = await nats.connect(url)
    js = nc.jetstream()
    await js.add_stream(name="S", subjects=["s.>"])
    await js.publish("s.one", b"{}")
    await nc.close()
# the interval given, not read from the settings, which would import pydantic and the playbook
# validator into the floor (~100 ms here): the floor is nats-py and a nats-server, nothing of ours
with NatsServer(sync_interval=os.environ.get("NOETL_NATS_SYNC_INTERVAL", "")) as srv:
    asyncio.run(main(srv.url))
"""


async def _wall(*argv: str) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{Path(argv[0]).name} exited {proc.returncode}: {err.decode()[-500:]}")
    return took * 1000


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="noetl-bench-") as d:
        f = Path(d) / "one_step.yaml"
        f.write_text(playbooks.one_step())
        for _ in range(max(runs, sizes.startup_runs)):
            rec.add(NAME, "floor_wall", await _wall(sys.executable, "-c", FLOOR), "ms")
            rec.add(NAME, "noetl_run_wall", await _wall(str(NOETL), "run", str(f)), "ms")
