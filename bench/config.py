"""Problem sizes of a full run and of ``--quick``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    floor_hops: int = 2000  # sequential hops for p50/p99
    floor_publishes: int = 20_000  # publish_async with many in flight
    floor_inflight_hops: int = 10_000  # hops with floor_inflight at once
    floor_inflight: int = 64
    chain_steps: int = 100
    loop_parallel: int = 10_000
    loop_parallel_small: int = 1_000  # the same loop ten times smaller: is peak RSS flat?
    loop_sequential: int = 1_000
    loop_tiny: int = 100_000  # exec: local against distributed (SEMANTICS §21)
    worker_concurrency: int = 256
    fanout_executions: int = 1_000
    one_step_executions: int = 200
    startup_runs: int = 5
    shapes_chain: int = 50  # issue 29's table, on the engine and on Restate (bench.shapes)
    shapes_loop: int = 1_000
    shapes_one: int = 50
    shapes_conc: int = 50
    shapes_conc_steps: int = 20
    shapes_burst: int = 200
    io_http: int = 5_000  # bench.io_loops: GETs of a local HTTP server
    io_pg: int = 5_000  # bench.io_loops: single-row INSERTs
    million: int = 1_000_000  # bench.million: memory and event bytes of a huge loop
    peers: bool = True  # Restate beside the engine in `shapes` (installed on first use)
    peer_chain: int = 50
    peer_loop: int = 500
    peer_fanout: int = 200  # workflows/flows of three activities/tasks each


FULL = Sizes()

QUICK = Sizes(
    floor_hops=500,
    floor_publishes=5_000,
    floor_inflight_hops=2_000,
    chain_steps=100,
    loop_parallel=2_000,
    loop_parallel_small=200,
    loop_sequential=200,
    loop_tiny=5_000,
    fanout_executions=200,
    one_step_executions=50,
    startup_runs=1,
    shapes_chain=20,
    shapes_loop=200,
    shapes_one=10,
    shapes_conc=10,
    shapes_conc_steps=5,
    shapes_burst=20,
    io_http=500,
    io_pg=500,
    million=20_000,
    peers=False,
    peer_chain=20,
    peer_loop=100,
    peer_fanout=50,
)
