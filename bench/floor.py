"""The floor: what one step hop of this design costs in raw JetStream, with no engine at all.

A hop is what every step and every loop iteration pays at least once: the server publishes a
command to a work-queue stream (awaiting the ack), a worker whose pull request is always waiting
fetches it, publishes an event (awaiting the ack) and acks the command, and the server's ordered
consumer receives the event. The three roles use their own connections, as the processes do.
Everything the engine does above this is overhead, so the other scenarios are reported as
ratios to this floor measured in the same run, on the same machine, with the same nats-py.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from pathlib import Path
from typing import Any

from nats.js.api import AckPolicy, ConsumerConfig, RetentionPolicy, StorageType, StreamConfig

from bench.config import Sizes
from bench.record import Recorder, percentile
from noetl.events.bus import connect
from noetl.host.natsserver import NatsServer

NAME = "floor"
ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = b'{"command_id":"%d","execution_id":"e","step":"s","ctx":{},"workload":{},"args":{}}'


async def worker_main(url: str) -> None:
    """The worker role, in its own process as in the real design: fetch, publish, ack."""
    nc = await connect(url, name="floor-worker")
    js = nc.jetstream()
    pull = await js.pull_subscribe(
        "floor.cmd.default",
        durable="floor-worker",
        stream="FLOOR_CMD",
        config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, max_ack_pending=-1),
    )
    tasks: set[asyncio.Task[None]] = set()

    async def handle(m: Any) -> None:
        await js.publish("floor.evt.0.e.step.done", m.data, headers={"Nats-Msg-Id": "ev" + m.reply})
        await m.ack()

    print("ready", flush=True)
    while True:
        try:
            msgs = await pull.fetch(64, timeout=1)
        except TimeoutError:
            continue
        for m in msgs:
            t = asyncio.create_task(handle(m))
            tasks.add(t)
            t.add_done_callback(tasks.discard)


class Hops:
    """The server role (publish a command, receive the event) against a worker process."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.waiting: dict[bytes, asyncio.Future[None]] = {}

    async def start(self) -> None:
        self.nc = await connect(self.url, name="floor-server")
        self.js = self.nc.jetstream()
        for name, subjects, retention in (
            ("FLOOR_CMD", ["floor.cmd.>"], RetentionPolicy.WORK_QUEUE),
            ("FLOOR_EVT", ["floor.evt.>"], RetentionPolicy.LIMITS),
            ("FLOOR_RAW", ["floor.raw.>"], RetentionPolicy.LIMITS),
        ):
            await self.js.add_stream(
                StreamConfig(name=name, subjects=subjects, retention=retention, storage=StorageType.FILE)
            )

        async def on_event(msg: Any) -> None:
            fut = self.waiting.pop(msg.data, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

        self.events = await self.js.subscribe("floor.evt.>", cb=on_event, ordered_consumer=True)
        self.worker = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bench.floor", self.url, stdout=asyncio.subprocess.PIPE, cwd=ROOT
        )
        assert self.worker.stdout is not None
        line = await asyncio.wait_for(self.worker.stdout.readline(), 30)
        if line.strip() != b"ready":
            raise RuntimeError("the floor worker did not start")

    async def hop(self, i: int) -> None:
        data = PAYLOAD % i
        fut = asyncio.get_running_loop().create_future()
        self.waiting[data] = fut
        await self.js.publish("floor.cmd.default", data, headers={"Nats-Msg-Id": f"c{i}"})
        await fut

    async def stop(self) -> None:
        if self.worker.returncode is None:
            self.worker.kill()
            await self.worker.wait()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.close(), 2)


async def _one_run(url: str, sizes: Sizes, run: int, rec: Recorder) -> None:
    hops = Hops(url)
    await hops.start()
    base = run * 10_000_000
    try:
        for i in range(50):  # warm the connections and the consumer
            await hops.hop(base + i)
        lat = []
        for i in range(sizes.floor_hops):
            t = time.perf_counter()
            await hops.hop(base + 1000 + i)
            lat.append((time.perf_counter() - t) * 1000)
        rec.add(NAME, "hop_p50", percentile(lat, 50), "ms")
        rec.add(NAME, "hop_p99", percentile(lat, 99), "ms")

        n, k = sizes.floor_inflight_hops, sizes.floor_inflight
        counter = iter(range(base + 100_000, base + 100_000 + n))

        async def driver() -> None:
            for i in counter:
                await hops.hop(i)

        t = time.perf_counter()
        await asyncio.gather(*(driver() for _ in range(k)))
        rec.add(NAME, f"hops_per_s_{k}_in_flight", n / (time.perf_counter() - t), "hops/s", higher=True)

        js, n = hops.js, sizes.floor_publishes
        t = time.perf_counter()
        for i in range(0, n, 1000):
            futs = [await js.publish_async(f"floor.raw.{j}", b"{}") for j in range(i, min(n, i + 1000))]
            await asyncio.gather(*futs)
        rec.add(NAME, "publish_async_per_s", n / (time.perf_counter() - t), "msg/s", higher=True)

        t = time.perf_counter()
        for j in range(1000):
            await js.publish(f"floor.raw.{j}", b"{}")
        rec.add(NAME, "publish_awaited_per_s", 1000 / (time.perf_counter() - t), "msg/s", higher=True)
    finally:
        await hops.stop()


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    for r in range(runs):
        with NatsServer() as ns:
            await _one_run(ns.url, sizes, r, rec)


if __name__ == "__main__":
    asyncio.run(worker_main(sys.argv[1]))
