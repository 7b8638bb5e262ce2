"""The chain, loop and fan-out shapes on Temporal; run by ``bench.peers`` with the peer's own Python.

Usage: ``python temporal_shapes.py ADDRESS CHAIN LOOP FANOUT RUNS``; prints one JSON object. The
activities do nothing, like the engine's noop tasks; the workflows run unsandboxed, which only
makes Temporal faster.

- chain: one workflow running CHAIN activities one after another (ms per activity);
- loop: one workflow starting LOOP activities at once (activities/s);
- fanout: FANOUT workflows started at once, three activities one after another in each
  (activities/s), like the engine's ``fanout`` scenario of three-step executions.

The process ends with ``os._exit`` once its JSON is flushed: temporalio's Rust core threads can
touch the GIL while CPython finalizes and abort the process after the measurement
(temporalio/sdk-python#300; about one run in six here, SIGABRT or SIGSEGV).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

QUEUE = "bench"
TIMEOUT = timedelta(seconds=60)
FANOUT_STEPS = 3
PAUSE = 2.0  # seconds of quiet before each measured run


@activity.defn
async def noop(i: int) -> int:
    return i


@workflow.defn
class Chain:
    @workflow.run
    async def run(self, n: int) -> int:
        for i in range(n):
            await workflow.execute_activity(noop, i, start_to_close_timeout=TIMEOUT)
        return n


@workflow.defn
class Loop:
    @workflow.run
    async def run(self, n: int) -> int:
        calls = [workflow.execute_activity(noop, i, start_to_close_timeout=TIMEOUT) for i in range(n)]
        return len(await asyncio.gather(*calls))


async def timed_chain(client: Client, n: int) -> float:
    t = time.perf_counter()
    await client.execute_workflow(Chain.run, n, id=uuid.uuid4().hex, task_queue=QUEUE)
    return time.perf_counter() - t


async def timed_loop(client: Client, n: int) -> float:
    t = time.perf_counter()
    await client.execute_workflow(Loop.run, n, id=uuid.uuid4().hex, task_queue=QUEUE)
    return time.perf_counter() - t


async def timed_fanout(client: Client, n: int) -> float:
    t = time.perf_counter()
    calls = [
        client.execute_workflow(Chain.run, FANOUT_STEPS, id=uuid.uuid4().hex, task_queue=QUEUE)
        for _ in range(n)
    ]
    await asyncio.gather(*calls)
    return time.perf_counter() - t


async def main(address: str, chain: int, loop: int, fanout: int, runs: int) -> dict[str, list[float]]:
    client = await Client.connect(address)
    out: dict[str, list[float]] = {"chain_ms_per_step": [], "loop_per_s": [], "fanout_steps_per_s": []}
    async with Worker(
        client,
        task_queue=QUEUE,
        workflows=[Chain, Loop],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        # Each measured run starts after PAUSE seconds of quiet: a chain started right after
        # another workflow closed took 51 ms an activity, after a pause 31 ms (the dev server is
        # still busy with the closed one). One shape at a time, each warmed up first.
        await timed_chain(client, 3)
        for _ in range(runs):
            await asyncio.sleep(PAUSE)
            out["chain_ms_per_step"].append(await timed_chain(client, chain) * 1000 / chain)
        await timed_loop(client, 10)
        for _ in range(runs):
            await asyncio.sleep(PAUSE)
            out["loop_per_s"].append(loop / await timed_loop(client, loop))
        await timed_fanout(client, 10)
        for _ in range(runs):
            await asyncio.sleep(PAUSE)
            out["fanout_steps_per_s"].append(fanout * FANOUT_STEPS / await timed_fanout(client, fanout))
    return out


if __name__ == "__main__":
    address, chain, loop, fanout, runs = sys.argv[1], *map(int, sys.argv[2:6])
    print(json.dumps(asyncio.run(main(address, chain, loop, fanout, runs))), flush=True)
    sys.stderr.flush()
    os._exit(0)
