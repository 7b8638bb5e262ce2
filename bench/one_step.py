"""One-step executions, one after another, on a server and worker that are already running.

``p50``/``p99`` run from the request's publish to the arrival of its ``workflow.finished``
(which carries the result): the latency a caller of the engine sees. ``client_p50`` is the same
through ``run_and_wait``, which also reads the execution's events back to build its output.
"""

from __future__ import annotations

import asyncio
import time

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, note_client_mismatches, run_timed, submit
from bench.config import Sizes
from bench.record import Recorder, percentile
from noetl.events.ids import execution_id_for

NAME = "one_step"


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    text = playbooks.one_step()
    async with Cluster(concurrency=sizes.worker_concurrency) as c:
        js = c.nc.jetstream()
        watch = await FinishWatch(c.nc).start()
        for _ in range(5):
            await run_timed(c.nc, watch, new_request(text), timeout=30)
        for _ in range(runs):
            lat = []
            for _ in range(sizes.one_step_executions):
                req = new_request(text)
                eid = execution_id_for(req["request_id"])
                done = watch.expect(eid)
                t0 = time.perf_counter()
                await (await submit(js, req))
                await asyncio.wait_for(done, 30)
                lat.append((watch.succeeded(eid) - t0) * 1000)
            rec.add(NAME, "p50", percentile(lat, 50), "ms")
            rec.add(NAME, "p99", percentile(lat, 99), "ms")
            client = []
            for _ in range(max(5, sizes.one_step_executions // 10)):
                t0 = time.perf_counter()
                await run_timed(c.nc, watch, new_request(text), timeout=30)
                client.append((time.perf_counter() - t0) * 1000)
            rec.add(NAME, "client_p50", percentile(client, 50), "ms")
        await watch.stop()
    note_client_mismatches(rec, NAME)
