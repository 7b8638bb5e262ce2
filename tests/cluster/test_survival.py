"""Losing any one node of a 3-node NATS cluster, or any one service process, loses nothing.

Each test runs 10 executions of a parallel loop (30 iterations, 10 in flight) whose every
iteration POSTs ``{execution, i}`` to a local recorder, on 2 servers and 2 workers connected to
the whole cluster (NOETL_REPLICAS=3: every stream has a copy on each node), applies one fault
mid-run, and then asserts for every execution:

- it succeeded with the right result (``{n: 30, s: 435}``);
- every iteration's side effect happened: each (execution, i) reached the recorder at least once
  (more than once is allowed: at-least-once towards the outside world; the count is reported);
- the event log holds exactly one terminal event per run (step.done/failed,
  loop.iteration.done/failed per step run and index): exactly-once inside the system;
- NOETL_COMMANDS is empty at the end (no command left behind or stuck unacknowledged).

A stuck run never hangs a test: every wait has a deadline, and the failure message gives the
counts (finished, stuck, missing records, duplicate records, duplicate terminal events, commands
left) with what was done when, and the tail of every service log.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from noetl.events import subjects as s
from tests.cluster.harness import (
    NatsCluster,
    Recorder,
    Services,
    client,
    close_client,
    finish_all,
    read_events,
    recorder_loop_playbook,
    submit,
    terminal_events_per_run,
    wait_commands_drained,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ITERATIONS = 30
MAX_IN_FLIGHT = 10
EXECUTIONS = 10
EXPECTED = {"n": ITERATIONS, "s": sum(range(ITERATIONS))}
CONCURRENCY = 8  # per worker
TRIGGER_TIMEOUT = 30.0  # s for the system to reach the fault's trigger
FAULT_TIMEOUT = 45.0  # s for applying one fault (kills, restarts, waits)
FINISH_TIMEOUT = 45.0  # s after the fault for every execution to finish
SCENARIO_TIMEOUT = 120.0  # hard stop of one test (a bug in the waits must not hang the suite)


@dataclass
class Run:
    cluster: NatsCluster
    recorder: Recorder
    services: Services
    nc: Any
    t0: float = field(default_factory=time.monotonic)
    notes: list[str] = field(default_factory=list)  # what happened when (for the message)
    problems: list[str] = field(default_factory=list)  # failures found while applying the fault

    @property
    def js(self) -> Any:
        return self.nc.jetstream()

    def note(self, text: str) -> None:
        self.notes.append(f"t+{time.monotonic() - self.t0:.1f}s [{len(self.recorder)} POSTs] {text}")

    def worker(self) -> Any:
        return self.services.worker(concurrency=CONCURRENCY)


Fault = Callable[[Run], Awaitable[None]]


async def run_scenario(
    cluster: NatsCluster,
    recorder: Recorder,
    services: Services,
    fault: Fault,
    *,
    servers: int = 2,
    workers: int = 2,
    executions: int = EXECUTIONS,
    trigger: int = 60,
    delay: float = 0.2,
) -> None:
    """Start the services, submit the executions, apply ``fault`` once ``trigger`` POSTs arrived,
    wait for the ends, and assert the guarantees (one message with every count)."""
    recorder.delay = delay  # each POST takes this long: the runs last through the fault
    nc = await client(cluster.urls)  # declares the R3 streams and waits for their leaders
    run = Run(cluster, recorder, services, nc)
    try:
        for _ in range(servers):
            services.server()
        for _ in range(workers):
            services.worker(concurrency=CONCURRENCY)
        playbook = recorder_loop_playbook(ITERATIONS, MAX_IN_FLIGHT)
        eids = [await submit(nc, playbook, payload={"recorder": recorder.url}) for _ in range(executions)]
        run.note(f"submitted {len(eids)} executions")
        finish_timeout = FINISH_TIMEOUT
        if await _reach(run, trigger):
            for kind, want in (("server", servers), ("worker", workers)):
                alive = len(services.alive(kind))
                if alive != want:
                    run.problems.append(
                        f"{want - alive} of {want} {kind}s exited before the fault (start-up)"
                    )
            run.note("fault starts")
            try:
                await asyncio.wait_for(fault(run), FAULT_TIMEOUT)
                run.note("fault done")
            except Exception as e:
                run.problems.append(f"applying the fault failed: {e!r}")
        else:
            dead = "" if services.alive() else " (every service process exited)"
            run.problems.append(
                f"only {len(recorder)} POSTs within {TRIGGER_TIMEOUT} s (fault at {trigger}){dead}"
            )
            finish_timeout = 5.0
        outputs, stuck = await finish_all(nc, eids, finish_timeout)
        run.note(f"{len(outputs)} finished, {len(stuck)} stuck")
        left = await wait_commands_drained(run.js, 3 if stuck else 10)
        message, ok = await report(run, eids, outputs, stuck, left)
    finally:
        await close_client(nc)
    print(message)  # the counts and the timeline of a passing run too (pytest -rP)
    assert ok, f"{message}\n\n{services.output(tail=1500)}"


async def _reach(run: Run, trigger: int) -> bool:
    """Wait for ``trigger`` POSTs; False after TRIGGER_TIMEOUT, or at once when every service died."""
    deadline = time.monotonic() + TRIGGER_TIMEOUT
    while len(run.recorder) < trigger:
        if time.monotonic() > deadline or not run.services.alive():
            return False
        await asyncio.sleep(0.05)
    return True


async def report(
    run: Run, eids: list[str], outputs: dict[str, dict[str, Any]], stuck: list[str], left: int | None
) -> tuple[str, bool]:
    failed = {  # with the error, so a failure says what failed
        e[:8]: (o["status"], str(o.get("error"))[:300])
        for e, o in outputs.items()
        if o["status"] != "success"
    }
    wrong = {
        e[:8]: o["result"] for e, o in outputs.items() if o["status"] == "success" and o["result"] != EXPECTED
    }
    records = run.recorder.count_by_keys("execution", "i")
    missing = [(e, i) for e in eids for i in range(ITERATIONS) if (e, i) not in records]
    dup_records = sum(n - 1 for n in records.values() if n > 1)
    strays = sum(n for (e, _), n in records.items() if e not in eids)
    dup_terminal: dict[str, int] = {}
    progress: dict[str, int] = {}
    for e in eids:
        events = outputs[e]["events"] if e in outputs else None
        if events is None:
            with contextlib.suppress(Exception):
                events = await read_events(run.js, e, timeout=10)
        if events is None:
            dup_terminal[e[:8]] = -1  # unreadable
            continue
        per_run = terminal_events_per_run(events)
        extra = sum(n - 1 for n in per_run.values() if n > 1)
        if extra:
            dup_terminal[e[:8]] = extra
        if e in stuck:
            progress[e[:8]] = sum(1 for ev in events if ev.get("name") == "loop.iteration.done")
    ok = (
        not stuck
        and not failed
        and not wrong
        and not missing
        and not dup_terminal
        and left == 0
        and not run.problems
    )
    lines = [
        f"finished {len(outputs)}/{len(eids)}, stuck {len(stuck)}, failed {len(failed)}, "
        f"wrong results {len(wrong)}, missing records {len(missing)}, duplicate records {dup_records}, "
        f"duplicate terminal events {sum(v for v in dup_terminal.values() if v > 0)}, commands left {left}",
    ]
    if failed:
        lines.append(f"failed: {failed}")
    if wrong:
        lines.append(f"wrong results (want {EXPECTED}): {wrong}")
    if missing:
        lines.append(f"missing records (first 10): {[(e[:8], i) for e, i in missing[:10]]}")
    if dup_terminal:
        lines.append(f"duplicate terminal events per execution (-1: log unreadable): {dup_terminal}")
    if progress:
        lines.append(f"stuck executions' loop.iteration.done counts (of {ITERATIONS}): {progress}")
    if strays:
        lines.append(f"records of unknown executions: {strays}")
    lines += [f"problem: {p}" for p in run.problems]
    lines += [f"  {n}" for n in run.notes]
    return "\n".join(lines), ok


# ---------------------------------------------------------------------------------------------
# faults


async def _kill_stream_leader(run: Run, stream: str, down_for: float) -> None:
    leader = await run.cluster.wait_leader(run.js, stream, 10)
    run.note(f"SIGKILL {leader}, leader of {stream}")
    await asyncio.to_thread(run.cluster.kill, leader)
    killed = time.monotonic()
    try:
        new = await run.cluster.wait_leader(run.js, stream, min(down_for, 20), not_on=leader)
        run.note(f"{stream} leader now {new}")
    except TimeoutError:
        run.note(f"{stream} had no new leader within {min(down_for, 20):g} s")
    await asyncio.sleep(max(0.0, down_for - (time.monotonic() - killed)))
    await asyncio.to_thread(run.cluster.restart, leader)
    run.note(f"{leader} restarted and healthy")


async def kill_events_leader(run: Run) -> None:
    await _kill_stream_leader(run, s.EVENTS_STREAM, down_for=5)


async def kill_commands_leader(run: Run) -> None:
    await _kill_stream_leader(run, s.COMMANDS_STREAM, down_for=10)


async def kill_one_server(run: Run) -> None:
    servers = run.services.alive("server")
    if len(servers) != 2:
        run.problems.append(f"{len(servers)} servers alive before the kill, not 2")
    victim = servers[0]
    run.note(f"SIGKILL server pid {victim.pid}")
    await asyncio.to_thread(run.services.kill, victim)


async def rolling_restart(run: Run) -> None:
    for kind, start in (("server", run.services.server), ("worker", run.worker)):
        for old in run.services.alive(kind):
            run.note(f"SIGTERM {kind} pid {old.pid}")
            code = await asyncio.to_thread(run.services.terminate, old, 20)
            if code != 0:
                run.problems.append(f"{kind} pid {old.pid} exited with {code} on SIGTERM (want 0)")
            new = start()
            run.note(f"{kind} pid {old.pid} exited {code}; started pid {new.pid}")
            await asyncio.sleep(3)


async def pause_events_leader(run: Run) -> None:
    leader = await run.cluster.wait_leader(run.js, s.EVENTS_STREAM, 10)
    run.note(f"SIGSTOP {leader}, leader of {s.EVENTS_STREAM}")
    run.cluster.pause(leader)
    try:
        await asyncio.sleep(8)
    finally:
        run.cluster.resume(leader)
    run.note(f"SIGCONT {leader}")


# ---------------------------------------------------------------------------------------------
# the tests


async def _scenario(*args: Any, **kw: Any) -> None:
    await asyncio.wait_for(run_scenario(*args, **kw), SCENARIO_TIMEOUT)


async def test_sigkill_of_the_events_leader_then_restart(
    nats_cluster: NatsCluster, recorder: Recorder, services: Services
) -> None:
    """Kills: the node leading NOETL_EVENTS (SIGKILL) after 60 of 300 POSTs; restarts it ~5 s later."""
    await _scenario(nats_cluster, recorder, services, kill_events_leader)


async def test_sigkill_of_the_commands_leader_then_restart(
    nats_cluster: NatsCluster, recorder: Recorder, services: Services
) -> None:
    """Kills: the node leading NOETL_COMMANDS (SIGKILL) after 60 of 300 POSTs; restarts it ~10 s later."""
    await _scenario(nats_cluster, recorder, services, kill_commands_leader)


async def test_sigkill_of_one_of_two_servers(
    nats_cluster: NatsCluster, recorder: Recorder, services: Services
) -> None:
    """Kills: one of the 2 server replicas (SIGKILL) after 60 of 300 POSTs; no restart: the other
    takes over its executions."""
    await _scenario(nats_cluster, recorder, services, kill_one_server)


async def test_rolling_restart_of_every_server_and_worker(
    nats_cluster: NatsCluster, recorder: Recorder, services: Services
) -> None:
    """Stops: each server, then each worker, one by one (SIGTERM, then a new one, 3 s apart), while
    the executions run (POSTs take 0.8 s so the load lasts through the restarts). Every SIGTERM
    ends in exit code 0."""
    await _scenario(nats_cluster, recorder, services, rolling_restart, trigger=20, delay=0.8)


async def test_network_cut_of_the_events_leader(
    nats_cluster: NatsCluster, recorder: Recorder, services: Services
) -> None:
    """Cuts: the node leading NOETL_EVENTS stops answering (SIGSTOP) for 8 s after 60 of 300 POSTs,
    then comes back (SIGCONT); connections to it stay open but silent meanwhile."""
    await _scenario(nats_cluster, recorder, services, pause_events_leader)


async def test_services_declare_every_stream_with_three_replicas(
    nats_cluster: NatsCluster, services: Services
) -> None:
    """With NOETL_REPLICAS=3 and the cluster's URL list, the services themselves create every
    stream, KV bucket and object store with a copy on each node (no client declares them here)."""
    services.server()
    services.worker(concurrency=2)
    nc = await client(nats_cluster.urls, ensure_replicas=None)
    try:
        js = nc.jetstream()
        core = {s.EVENTS_STREAM, s.COMMANDS_STREAM, s.REQUESTS_STREAM, s.ITER_STREAM}
        replicas: dict[str, int] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                infos = await asyncio.wait_for(js.streams_info(), 5)
                replicas = {i.config.name: i.config.num_replicas or 1 for i in infos}
                if core <= set(replicas) and set(replicas.values()) == {3}:
                    break
            if not services.alive():
                break
            await asyncio.sleep(0.25)
    finally:
        await close_client(nc)
    assert core <= set(replicas), f"streams missing after 30 s: {core - set(replicas)}\n{services.output()}"
    assert set(replicas.values()) == {3}, f"replicas per stream: {replicas}\n{services.output()}"
    await asyncio.sleep(2)  # a service that fails right after declaring (no leader yet) exits now
    assert len(services.alive()) == 2, f"a service exited during start-up\n{services.output()}"
