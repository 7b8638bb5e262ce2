"""Many executions at once: a thousand requests of a three-step playbook published together.

Measures what a busy server sustains across executions (executions/s, steps/s) and what each
request waits from its publish to its ``workflow.finished`` (p50/p99) while all the others run.
"""

from __future__ import annotations

import asyncio
import time

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.config import Sizes
from bench.record import Recorder, percentile
from noetl.events.ids import execution_id_for

NAME = "fanout"
STEPS = 3


async def _burst(c: Cluster, watch: FinishWatch, text: str, n: int) -> tuple[float, list[float]]:
    js = c.nc.jetstream()
    reqs = [new_request(text) for _ in range(n)]
    ids = [execution_id_for(r["request_id"]) for r in reqs]
    done = [watch.expect(e) for e in ids]
    sent: list[float] = []
    acks = []
    t0 = time.perf_counter()
    for r in reqs:
        sent.append(time.perf_counter())
        acks.append(await submit(js, r))
    await asyncio.gather(*acks)
    await asyncio.wait_for(asyncio.gather(*done), timeout=max(120.0, n / 5))
    ends = [watch.succeeded(e) for e in ids]
    return max(ends) - t0, [(e - s) * 1000 for s, e in zip(sent, ends, strict=True)]


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    n = sizes.fanout_executions
    text = playbooks.three_step()
    async with Cluster(concurrency=sizes.worker_concurrency) as c:
        watch = await FinishWatch(c.nc).start()
        await _burst(c, watch, text, 10)  # warm-up
        for _ in range(runs):
            wall, lat = await _burst(c, watch, text, n)
            rec.add(NAME, "executions_per_s", n / wall, "exec/s", higher=True)
            rec.add(NAME, "steps_per_s", n * STEPS / wall, "steps/s", higher=True)
            rec.add(NAME, "latency_p50", percentile(lat, 50), "ms")
            rec.add(NAME, "latency_p99", percentile(lat, 99), "ms")
        for role, mib in c.peak_rss_mib().items():
            rec.add(NAME, f"{role}_rss", mib, "MiB")
        await watch.stop()
