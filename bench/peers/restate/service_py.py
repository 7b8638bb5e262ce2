"""Restate Python SDK service for the benchmark's shapes (served with hypercorn).

Run with the Restate venv's Python (``bench/.peers/restate/py``), never imported by the bench.
"""

from __future__ import annotations

from typing import Any

import restate

bench = restate.Service("BenchPy")


def step(i: int) -> int:
    return i


@bench.handler()
async def chain(ctx: restate.Context, n: int) -> int:
    for i in range(n):
        await ctx.run_typed("s", step, i=i)
    return n


@bench.handler()
async def loop(ctx: restate.Context, req: dict[str, Any]) -> int:
    n, width = req["n"], req["width"]
    nxt = 0
    pending: list[Any] = []
    while nxt < n or pending:
        while nxt < n and len(pending) < width:
            pending.append(ctx.run_typed("s", step, i=nxt))
            nxt += 1
        _, pending = await restate.wait_completed(*pending)
    return n


app = restate.app(services=[bench])
