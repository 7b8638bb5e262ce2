"""A chain of sequential noop steps: the latency of one step when nothing runs in parallel.

Per run: milliseconds per step (request to ``workflow.finished`` divided by the steps) and the
p50/p99 of single steps, taken as the gaps between consecutive ``step.done`` events in the
worker's own clock (each gap is one full cycle: server decides, command out, worker runs, event
back). One unrecorded execution first, so template compilation is not counted.
"""

from __future__ import annotations

import itertools

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, note_client_mismatches, run_timed, ts
from bench.config import Sizes
from bench.record import Recorder, percentile

NAME = "chain"


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    n = sizes.chain_steps
    text = playbooks.chain(n)
    async with Cluster(concurrency=sizes.worker_concurrency) as c:
        watch = await FinishWatch(c.nc).start()
        await run_timed(c.nc, watch, new_request(text), timeout=120)
        floor = rec.median("floor", "hop_p50")
        for _ in range(runs):
            took, out = await run_timed(c.nc, watch, new_request(text), timeout=120)
            done = [ts(e) for e in out["events"] if e["name"] == "step.done"]
            gaps = [(b - a) * 1000 for a, b in itertools.pairwise(done)]
            per_step = took * 1000 / n
            rec.add(NAME, "ms_per_step", per_step, "ms")
            rec.add(NAME, "step_p50", percentile(gaps, 50), "ms")
            rec.add(NAME, "step_p99", percentile(gaps, 99), "ms")
            if floor:
                rec.add(NAME, "ratio_to_floor_p50", per_step / floor, "x")
        for role, mib in c.peak_rss_mib().items():
            rec.add(NAME, f"{role}_rss", mib, "MiB")
        await watch.stop()
    note_client_mismatches(rec, NAME)
