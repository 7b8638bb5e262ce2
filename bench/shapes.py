"""Issue 29's five shapes on the engine and on Restate (TypeScript and Python SDKs), interleaved.

One engine cluster (nats-server, ``noetl server``, ``noetl worker``) and one Restate server with
both SDK endpoints stay up for the whole scenario; each round runs every shape on the engine,
then on Restate's TS endpoint, then on its Python endpoint, so all three see the same machine
load within seconds of each other. The floor (``bench.floor``) runs earlier in the same
``python -m bench`` invocation. Shapes (sizes as in the issue's table):

- ``chain``: one execution of 50 sequential steps (ms per step, request to result);
- ``loop``: 1 000 steps, 50 in flight, in one execution (steps/s): the engine's parallel loop
  with ``max_in_flight: 50``, Restate's ``ctx.run`` in a sliding window of 50;
- ``one``: 50 one-step executions one after another (p50 ms, request to result);
- ``conc``: 50 executions of 20 sequential steps started at once (steps/s);
- ``burst``: 200 three-step executions started at once (executions/s).

``NOETL_BENCH_FSYNC=always`` (``python -m bench --fsync``) runs both with fsync on: JetStream's
``sync_interval: always`` and Restate's default WAL fsync; otherwise both fsync off (JetStream's
default, Restate's ``rocksdb-disable-wal-fsync``). When Restate cannot be installed, the engine's
figures are still taken and a note says why Restate's are missing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.config import Sizes
from bench.peers.restate import SERVICES, PeerUnavailable, Restate
from bench.record import Recorder, percentile
from noetl.events.ids import execution_id_for

NAME = "shapes"
FSYNC_ENV = "NOETL_BENCH_FSYNC"

Shape = Callable[[], Awaitable[float]]


def fsync_on() -> bool:
    return os.environ.get(FSYNC_ENV, "").lower() in {"always", "on", "1", "true"}


class Engine:
    """The five shapes on a running engine cluster, each returning its one figure."""

    def __init__(self, c: Cluster, watch: FinishWatch, sizes: Sizes) -> None:
        self.c, self.watch, self.sizes = c, watch, sizes
        self.js = c.nc.jetstream()
        self.texts = {
            "chain": playbooks.chain(sizes.shapes_chain),
            "loop": playbooks.tiny_loop(sizes.shapes_loop, exec_="distributed", max_in_flight=50),
            "one": playbooks.one_step(),
            "conc": playbooks.chain(sizes.shapes_conc_steps),
            "burst": playbooks.three_step(),
        }

    async def _many(self, text: str, n: int, timeout: float = 300) -> float:
        reqs = [new_request(text) for _ in range(n)]
        ids = [execution_id_for(r["request_id"]) for r in reqs]
        done = [self.watch.expect(e) for e in ids]
        t0 = time.perf_counter()
        acks = [await submit(self.js, r) for r in reqs]
        await asyncio.gather(*acks)
        await asyncio.wait_for(asyncio.gather(*done), timeout)
        return max(self.watch.succeeded(e) for e in ids) - t0

    async def chain(self) -> float:
        return await self._many(self.texts["chain"], 1) * 1000 / self.sizes.shapes_chain

    async def loop(self) -> float:
        return self.sizes.shapes_loop / await self._many(self.texts["loop"], 1)

    async def one(self) -> float:
        lat = [await self._many(self.texts["one"], 1) * 1000 for _ in range(self.sizes.shapes_one)]
        return percentile(lat, 50)

    async def conc(self) -> float:
        n, steps = self.sizes.shapes_conc, self.sizes.shapes_conc_steps
        return n * steps / await self._many(self.texts["conc"], n)

    async def burst(self) -> float:
        return self.sizes.shapes_burst / await self._many(self.texts["burst"], self.sizes.shapes_burst)


class RestateShapes:
    """The same five shapes on one Restate SDK endpoint, called through the HTTP ingress."""

    def __init__(self, client: Any, ingress: str, service: str, sizes: Sizes) -> None:
        self.client, self.sizes = client, sizes
        self.base = f"{ingress}/{service}"

    async def _call(self, handler: str, body: Any) -> None:
        r = await self.client.post(f"{self.base}/{handler}", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"restate {self.base}/{handler}: HTTP {r.status_code} {r.text[:200]}")

    async def _many(self, n: int, steps: int) -> float:
        t0 = time.perf_counter()
        await asyncio.gather(*(self._call("chain", steps) for _ in range(n)))
        return time.perf_counter() - t0

    async def chain(self) -> float:
        return await self._many(1, self.sizes.shapes_chain) * 1000 / self.sizes.shapes_chain

    async def loop(self) -> float:
        t0 = time.perf_counter()
        await self._call("loop", {"n": self.sizes.shapes_loop, "width": 50})
        return self.sizes.shapes_loop / (time.perf_counter() - t0)

    async def one(self) -> float:
        lat = [await self._many(1, 1) * 1000 for _ in range(self.sizes.shapes_one)]
        return percentile(lat, 50)

    async def conc(self) -> float:
        n, steps = self.sizes.shapes_conc, self.sizes.shapes_conc_steps
        return n * steps / await self._many(n, steps)

    async def burst(self) -> float:
        return self.sizes.shapes_burst / await self._many(self.sizes.shapes_burst, 3)


METRICS = [  # shape, metric suffix, unit, higher is better
    ("chain", "chain_ms_per_step", "ms", False),
    ("loop", "loop_steps_per_s", "steps/s", True),
    ("one", "one_step_p50", "ms", False),
    ("conc", "conc_steps_per_s", "steps/s", True),
    ("burst", "burst_exec_per_s", "exec/s", True),
]


async def _round(rec: Recorder, who: str, impl: Any, record: bool) -> None:
    for shape, metric, unit, higher in METRICS:
        value = await getattr(impl, shape)()
        if record:
            rec.add(NAME, f"{who}_{metric}", value, unit, higher=higher)
        await asyncio.sleep(0.5)  # let the last shape's stragglers (acks, purges) settle


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    import httpx

    fsync = fsync_on()
    if fsync:
        os.environ["NOETL_NATS_SYNC_INTERVAL"] = "always"  # read by the cluster's NatsServer
    durability = (
        "on: JetStream sync_interval always, Restate's default"
        if fsync
        else "off: JetStream's default (2 min), Restate rocksdb-disable-wal-fsync"
    )
    rec.note(
        NAME,
        f"fsync {durability}; "
        f"chain {sizes.shapes_chain} steps; loop {sizes.shapes_loop} steps 50 in flight; one-step p50 of "
        f"{sizes.shapes_one}; {sizes.shapes_conc} x {sizes.shapes_conc_steps}-step at once; "
        f"{sizes.shapes_burst} x 3-step at once; Restate steps are ctx.run, its client httpx",
    )
    peer: Restate | None = None
    with contextlib.ExitStack() as stack:
        if not sizes.peers:
            rec.note(NAME, "restate: not run (--quick runs no peers)")
        else:
            try:
                peer = stack.enter_context(Restate(fsync=fsync))
            except PeerUnavailable as e:
                rec.note(NAME, f"restate: no numbers: {e}")
        async with Cluster(concurrency=sizes.worker_concurrency) as c:
            watch = await FinishWatch(c.nc).start()
            limits = httpx.Limits(max_connections=1000, max_keepalive_connections=1000)
            async with httpx.AsyncClient(timeout=300, limits=limits) as client:
                systems: list[tuple[str, Any]] = [("noetl", Engine(c, watch, sizes))]
                if peer is not None:
                    systems += [
                        (f"restate_{sdk}", RestateShapes(client, peer.ingress, svc, sizes))
                        for sdk, svc in SERVICES.items()
                    ]
                for i in range(runs + 1):  # round 0 warms every system up, unrecorded
                    for who, impl in systems:
                        try:
                            await _round(rec, who, impl, record=i > 0)
                        except Exception as e:
                            rec.note(NAME, f"{who} round {i} failed: {type(e).__name__}: {e}")
            for role, mib in c.peak_rss_mib().items():
                rec.add(NAME, f"noetl_{role}_rss", mib, "MiB")
            if peer is not None:
                for proc, mib in peer.peak_rss_mib().items():
                    rec.add(NAME, f"restate_{proc}_rss", mib, "MiB")
            await watch.stop()
        if fsync:
            os.environ.pop("NOETL_NATS_SYNC_INTERVAL", None)
