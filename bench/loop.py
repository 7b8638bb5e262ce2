"""Loops: parallel throughput at two ``max_in_flight`` values, sequential throughput, and memory.

Each variant gets fresh server and worker processes, so their peak RSS belongs to that variant
alone; the parallel loop also runs ten times smaller, and the difference between the two peaks
says whether memory grows with the loop. Every iteration runs two noop tasks and so writes one
iteration snapshot to ``noetl_iter`` (the server purges a loop's snapshots once, when it ends), as the
issue's goal asks.
"""

from __future__ import annotations

import asyncio
import time

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.config import Sizes
from bench.record import Recorder
from noetl.events.ids import execution_id_for

NAME = "loop"


async def _variant(rec: Recorder, sizes: Sizes, runs: int, label: str, text: str, n: int) -> None:
    async with Cluster(concurrency=sizes.worker_concurrency) as c:
        js = c.nc.jetstream()
        watch = await FinishWatch(c.nc).start()
        for i in range(runs + 1):  # the first, small, only warms the caches
            req = new_request(text, {"n": 20} if i == 0 else None)
            done = watch.expect(execution_id_for(req["request_id"]))
            t0 = time.perf_counter()
            await (await submit(js, req))
            await asyncio.wait_for(done, timeout=max(120.0, n / 20))
            t_end = watch.succeeded(execution_id_for(req["request_id"]))
            if i:
                rec.add(NAME, f"{label}_iter_per_s", n / (t_end - t0), "it/s", higher=True)
        for role, mib in c.peak_rss_mib().items():
            rec.add(NAME, f"{label}_{role}_rss", mib, "MiB")
        await watch.stop()


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    big, small, seq = sizes.loop_parallel, sizes.loop_parallel_small, sizes.loop_sequential
    variants = [
        ("par256", playbooks.loop(big, parallel=True, max_in_flight=256), big),
        ("par64", playbooks.loop(big, parallel=True, max_in_flight=64), big),
        ("par64_small", playbooks.loop(small, parallel=True, max_in_flight=64), small),
        ("seq", playbooks.loop(seq, parallel=False), seq),
        ("tiny_dist", playbooks.tiny_loop(sizes.loop_tiny, exec_="distributed"), sizes.loop_tiny),
        ("tiny_local", playbooks.tiny_loop(sizes.loop_tiny, exec_="local"), sizes.loop_tiny),
    ]
    for label, text, n in variants:  # a failed variant leaves a note, not a hole in the others
        try:
            await _variant(rec, sizes, runs, label, text, n)
        except Exception as e:
            rec.note(NAME, f"{label} failed: {type(e).__name__}: {e}")
