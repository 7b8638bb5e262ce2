"""The chain, loop and fan-out shapes on Prefect 3; run by ``bench.peers`` with the peer's own Python.

Usage: ``python prefect_shapes.py CHAIN LOOP FANOUT RUNS`` with ``PREFECT_API_URL`` pointing at a
local ``prefect server``; prints one JSON object on its last line. Tasks do nothing, like the
engine's noop tasks.

- chain: one flow calling CHAIN tasks one after another (ms per task);
- loop: one flow mapping LOOP tasks (``Task.map`` on the default thread-pool runner; tasks/s);
- fanout: FANOUT flow runs, three tasks one after another in each (tasks/s), like the engine's
  ``fanout`` scenario of three-step executions; FLOWS_IN_FLIGHT flows at a time on a thread
  pool, which measured faster than gathering async flows (24 against 16 tasks/s on PostgreSQL).
  The local server answers 503 when 200 flow runs are created at once.

Flow-run heartbeats are switched off: Prefect 3.8 joins its heartbeat thread, which sleeps in
one-second slices, at the end of every flow run, adding up to a second to each run whatever it
does (a three-task flow run took 1.08 s, of which 0.94 s was that join). Heartbeats only detect
crashed runs, which nothing here needs; the engine's own leases stay on in its figures.
"""

from __future__ import annotations

import contextvars
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from prefect import flow, task
from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

FANOUT_STEPS = 3
FLOWS_IN_FLIGHT = 20
PAUSE = 2.0  # seconds of quiet before each measured run, as for Temporal


@task
def noop(i: int) -> int:
    return i


@flow
def chain(n: int) -> int:
    for i in range(n):
        noop(i)
    return n


@flow
def loop(n: int) -> int:
    return len(noop.map(range(n)).result())


@flow
def three_steps() -> int:
    for i in range(FANOUT_STEPS):
        noop(i)
    return FANOUT_STEPS


def fanout(n: int) -> None:
    # Threads start with an empty context: each copies this one, so it sees the settings above.
    with ThreadPoolExecutor(FLOWS_IN_FLIGHT) as pool:
        for f in [pool.submit(contextvars.copy_context().run, three_steps) for _ in range(n)]:
            f.result()


def timed(fn: Callable[[int], object], n: int) -> float:
    time.sleep(PAUSE)
    t = time.perf_counter()
    fn(n)
    return time.perf_counter() - t


def main(n_chain: int, n_loop: int, n_fanout: int, runs: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"chain_ms_per_step": [], "loop_per_s": [], "fanout_steps_per_s": []}
    # One shape at a time, each warmed up first and each run after a pause, as for Temporal.
    chain(3)
    for _ in range(runs):
        out["chain_ms_per_step"].append(timed(chain, n_chain) * 1000 / n_chain)
    loop(10)
    for _ in range(runs):
        out["loop_per_s"].append(n_loop / timed(loop, n_loop))
    fanout(3)
    for _ in range(runs):
        out["fanout_steps_per_s"].append(n_fanout * FANOUT_STEPS / timed(fanout, n_fanout))
    return out


if __name__ == "__main__":
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        result = main(*map(int, sys.argv[1:5]))
    print(json.dumps(result))
