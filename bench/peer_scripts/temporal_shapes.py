"""The chain and fan-out shapes on Temporal; run by ``bench.peers`` with the peer's own Python.

Usage: ``python temporal_shapes.py ADDRESS CHAIN FANOUT RUNS``; prints one JSON object. The
activities do nothing, like the engine's noop tasks; the workflows run unsandboxed, which only
makes Temporal faster.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

QUEUE = "bench"
TIMEOUT = timedelta(seconds=60)


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
class Fanout:
    @workflow.run
    async def run(self, n: int) -> int:
        calls = [workflow.execute_activity(noop, i, start_to_close_timeout=TIMEOUT) for i in range(n)]
        return len(await asyncio.gather(*calls))


async def main(address: str, chain: int, fanout: int, runs: int) -> dict[str, list[float]]:
    client = await Client.connect(address)
    out: dict[str, list[float]] = {"chain_ms_per_step": [], "fanout_per_s": []}
    async with Worker(
        client,
        task_queue=QUEUE,
        workflows=[Chain, Fanout],
        activities=[noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
    ):
        await client.execute_workflow(Chain.run, 3, id=uuid.uuid4().hex, task_queue=QUEUE)
        await client.execute_workflow(Fanout.run, 10, id=uuid.uuid4().hex, task_queue=QUEUE)
        for _ in range(runs):
            t = time.perf_counter()
            await client.execute_workflow(Chain.run, chain, id=uuid.uuid4().hex, task_queue=QUEUE)
            out["chain_ms_per_step"].append((time.perf_counter() - t) * 1000 / chain)
            t = time.perf_counter()
            await client.execute_workflow(Fanout.run, fanout, id=uuid.uuid4().hex, task_queue=QUEUE)
            out["fanout_per_s"].append(fanout / (time.perf_counter() - t))
    return out


if __name__ == "__main__":
    address, chain, fanout, runs = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(asyncio.run(main(address, chain, fanout, runs))))
