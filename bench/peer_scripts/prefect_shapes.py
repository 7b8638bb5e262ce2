"""The chain and fan-out shapes on Prefect 3; run by ``bench.peers`` with the peer's own Python.

Usage: ``python prefect_shapes.py CHAIN FANOUT RUNS`` with ``PREFECT_API_URL`` pointing at a
local ``prefect server``; prints one JSON object on its last line. Tasks do nothing, like the
engine's noop tasks; the fan-out is ``Task.map`` on Prefect's default thread-pool task runner.
"""

from __future__ import annotations

import json
import sys
import time

from prefect import flow, task


@task
def noop(i: int) -> int:
    return i


@flow
def chain(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@flow
def fanout(n: int) -> int:
    return len(noop.map(range(n)).result())


def main(n_chain: int, n_fanout: int, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"chain_ms_per_step": [], "fanout_per_s": []}
    chain(3)
    fanout(10)
    for _ in range(runs):
        t = time.perf_counter()
        chain(n_chain)
        out["chain_ms_per_step"].append((time.perf_counter() - t) * 1000 / n_chain)
        t = time.perf_counter()
        fanout(n_fanout)
        out["fanout_per_s"].append(n_fanout / (time.perf_counter() - t))
    return out


if __name__ == "__main__":
    result = main(*map(int, sys.argv[1:4]))
    print(json.dumps(result))
