"""A loop over a million elements, ``exec: distributed`` and ``exec: local``: does it finish, how
much memory do the server and the worker need, and how many event bytes does one element cost?

A first step returns ``list(range(n))`` (a python task); the list is over the payload limit, so
it travels by reference and the server reads it once for ``loop.in`` (``loop.items.read``). Each
placement runs once per run on fresh processes (peak RSS is the process's own high-water mark,
``VmHWM``). Event bytes are what the events stream grew by during the execution (``NOETL_EVENTS``
``state.bytes``, after the loop's end: JetStream's per-message overhead included), divided by
the elements; the list itself and the loop's results are in the results object store, not
counted; the iteration snapshots (``noetl_iter``) are counted apart, since the server purges them
when the loop ends. One noop task per iteration, ``max_in_flight`` 64. Not part of a default run
(about 10 minutes for both placements at today's rates, per round): ask for it with
``--scenario million --runs 1``; ``--quick`` runs 20 000 elements.
"""

from __future__ import annotations

import asyncio
import time

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.config import Sizes
from bench.record import Recorder
from noetl.events import subjects as s
from noetl.events.ids import execution_id_for

NAME = "million"


async def _stream_bytes(js: object, stream: str) -> int:
    info = await js.stream_info(stream)  # type: ignore[attr-defined]
    return int(info.state.bytes)


async def _once(rec: Recorder, n: int, sizes: Sizes, exec_: str) -> None:
    text = playbooks.referenced_loop(n, exec_=exec_)
    async with Cluster(concurrency=sizes.worker_concurrency) as c:
        js = c.nc.jetstream()
        watch = await FinishWatch(c.nc).start()
        before = await _stream_bytes(js, s.EVENTS_STREAM)
        req = new_request(text)
        eid = execution_id_for(req["request_id"])
        done = watch.expect(eid)
        t0 = time.perf_counter()
        await (await submit(js, req))
        await asyncio.wait_for(done, timeout=max(600.0, n / 500))
        wall = watch.succeeded(eid) - t0
        after = await _stream_bytes(js, s.EVENTS_STREAM)
        label = "local" if exec_ == "local" else "dist"
        rec.add(NAME, f"{label}_iter_per_s", n / wall, "it/s", higher=True)
        rec.add(NAME, f"{label}_event_bytes_per_element", (after - before) / n, "B")
        for role, mib in c.peak_rss_mib().items():
            rec.add(NAME, f"{label}_{role}_rss", mib, "MiB")
        await watch.stop()


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    n = sizes.million
    for _ in range(runs):
        for exec_ in ("distributed", "local"):  # interleaved: a slow minute hits both alike
            try:
                await _once(rec, n, sizes, exec_)
            except Exception as e:
                rec.note(NAME, f"{exec_} failed: {type(e).__name__}: {e}")
    rec.note(
        NAME,
        f"measured: {n:,} elements from a referenced list, one noop task each, max_in_flight 64, "
        "fresh processes",
    )
