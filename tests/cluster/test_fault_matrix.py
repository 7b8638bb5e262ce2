"""The cluster half of issue 25's fault matrix: every accepted execution ends, whatever a node
does, at the default settings (lease TTL 6 s, ack wait 30 s: what users get).

A 3-node JetStream cluster on loopback (every stream R3, routes through a proxy the test owns),
2 server replicas and 2 workers run 50 executions of a 100-iteration parallel loop
(max_in_flight 20) whose every iteration POSTs one record to a local recorder. One fault hits
once a fifth of the records arrived. Each case then asserts that every execution succeeded with
the right result, every record arrived exactly once, the log holds one terminal event per run,
and no command is left in NOETL_COMMANDS. Every case prints one ``FAULT-MATRIX`` line: the
fault, the recovery time (the fault's end to the last execution finished) and the counts.

All cases run through ``run_case`` (tests/cluster/harness.py); a new fault is a new function
in ``FAULTS``.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from collections.abc import Iterator

import pytest

from noetl.events import subjects as s
from tests.cluster.harness import (
    Case,
    Fault,
    Load,
    NatsCluster,
    Recorder,
    Services,
    run_case,
    stream_sizes,
    wait_all_leaders,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

DOWN_FOR = 10.0  # s a killed node stays down
PAUSE_FOR = 15.0  # s a paused or partitioned node stays away
SOAK = Load(executions=200, iterations=50, max_in_flight=20)


@pytest.fixture
def proxied_cluster() -> Iterator[NatsCluster]:
    c = NatsCluster(proxied_routes=True).start()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def default_services(proxied_cluster: NatsCluster) -> Iterator[Services]:
    """Services at the defaults users get: no NOETL_LEASE_TTL, no NOETL_ACK_WAIT."""
    keep = os.environ.get("NOETL_FAULT_MATRIX_KEEP")  # a dir: keep the service logs there
    log_dir = tempfile.mkdtemp(prefix="matrix-", dir=keep) if keep else None
    env = {"NOETL_LOG_LEVEL": "INFO"} if keep else {}
    svc = Services(
        proxied_cluster.url_list, ack_wait=None, lease_ttl=None, replicas=3, log_dir=log_dir, env=env
    )
    try:
        yield svc
    finally:
        svc.close()


# ---------------------------------------------------------------------------------------------
# faults


async def _leader(case: Case, stream: str) -> str:
    cluster: NatsCluster = case.nats
    return await cluster.wait_leader(case.js, stream, 20)


def kill_leader_of(stream: str, down_for: float = DOWN_FOR) -> Fault:
    async def fault(case: Case) -> None:
        cluster: NatsCluster = case.nats
        leader = await _leader(case, stream)
        case.note(f"SIGKILL {leader}, leader of {stream}")
        await asyncio.to_thread(cluster.kill, leader)
        await asyncio.sleep(down_for)
        await asyncio.to_thread(cluster.restart, leader)
        case.note(f"{leader} restarted and healthy")

    return fault


async def pause_events_leader(case: Case) -> None:
    cluster: NatsCluster = case.nats
    leader = await _leader(case, s.EVENTS_STREAM)
    case.note(f"SIGSTOP {leader}, leader of {s.EVENTS_STREAM}, for {PAUSE_FOR:g} s")
    cluster.pause(leader)
    try:
        await asyncio.sleep(PAUSE_FOR)
    finally:
        cluster.resume(leader)
    case.note(f"SIGCONT {leader}")


async def partition_events_leader(case: Case) -> None:
    """Cut the node leading NOETL_EVENTS off its peers (its clients stay connected to it) for
    PAUSE_FOR s, then heal the cut."""
    cluster: NatsCluster = case.nats
    leader = await _leader(case, s.EVENTS_STREAM)
    case.note(f"partition: {leader} (leader of {s.EVENTS_STREAM}) cut off its peers for {PAUSE_FOR:g} s")
    cluster.partition(leader)
    try:
        await asyncio.sleep(1)
        routes = {n: cluster.routes_of(n) for n in cluster.names}
        case.note(f"routes during the cut: {routes}")
        if routes.get(leader):
            case.problems.append(f"the cut left {leader} with {routes[leader]} routes")
        await asyncio.sleep(PAUSE_FOR - 1)
    finally:
        cluster.heal()
    case.note("partition healed")


async def rolling_restart(case: Case) -> None:
    """Every nats node (SIGTERM, started again on its store, healthy and every stream led), then
    every server and every worker (SIGTERM, exit 0, a new one), one at a time."""
    cluster: NatsCluster = case.nats
    for name in cluster.names:
        case.note(f"SIGTERM {name}")
        await asyncio.to_thread(cluster.stop, name, 30)
        await asyncio.to_thread(cluster.restart, name)
        await wait_all_leaders(case.js, 60)
        case.note(f"{name} back, every stream has a leader")
    svc = case.services
    for kind in ("server", "worker"):
        for old in svc.alive(kind):
            code = await asyncio.to_thread(svc.terminate, old, 60)
            if code != 0:
                case.problems.append(f"{kind} pid {old.pid} exited with {code} on SIGTERM (want 0)")
            new = svc.server() if kind == "server" else svc.worker(concurrency=16)
            case.note(f"{kind} pid {old.pid} exited {code}; started pid {new.pid}")
            await asyncio.sleep(3)


async def no_fault(case: Case) -> None:
    """The baseline: the same load, nothing breaks; its recovery is how long the last four
    fifths of the load take by themselves."""
    case.note("no fault")


FAULTS: dict[str, Fault] = {
    "baseline-no-fault": no_fault,
    "sigkill-events-leader": kill_leader_of(s.EVENTS_STREAM),
    "sigkill-commands-leader": kill_leader_of(s.COMMANDS_STREAM),
    "sigkill-leases-leader": kill_leader_of(f"KV_{s.LEASES_BUCKET}"),
    "sigstop-events-leader-15s": pause_events_leader,
    "partition-events-leader-15s": partition_events_leader,
    "rolling-restart-nodes-servers-workers": rolling_restart,
}


# ---------------------------------------------------------------------------------------------
# the cases


# the rolling restart takes ~25 s: POSTs answered after 0.3 s make the load (~100 POSTs/s on 2
# workers x 16) outlast it, so every node, server and worker goes while executions run
LOADS: dict[str, Load] = {"rolling-restart-nodes-servers-workers": Load(delay=0.3)}


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_fault_matrix(
    fault: str, proxied_cluster: NatsCluster, default_services: Services, recorder: Recorder
) -> None:
    """One fault at 50 executions x 100 iterations: every execution succeeds, every record once,
    0 commands left (see the module doc)."""
    load = LOADS.get(fault, Load())
    result = await run_case(fault, proxied_cluster, default_services, recorder, FAULTS[fault], load=load)
    assert result.ok, f"{result.message()}\n\n{default_services.output(tail=2000)}"


async def test_soak_with_one_leader_kill(
    proxied_cluster: NatsCluster, default_services: Services, recorder: Recorder
) -> None:
    """200 executions x 50 iterations with one SIGKILL of the NOETL_EVENTS leader (back after
    10 s); prints the services' RSS and the stream sizes before and after."""
    seen: dict[str, object] = {}

    async def before(case: Case) -> None:
        seen["rss"], seen["streams"] = default_services.rss(), await stream_sizes(case.js)

    async def after(case: Case) -> None:
        await asyncio.sleep(2)
        rss, streams = default_services.rss(), await stream_sizes(case.js)
        case.note(f"RSS KiB before {seen['rss']}")
        case.note(f"RSS KiB after  {rss}")
        case.note(f"streams (messages, bytes) before {seen['streams']}")
        case.note(f"streams (messages, bytes) after  {streams}")

    t = time.monotonic()
    result = await run_case(
        "soak-200x50-sigkill-events-leader",
        proxied_cluster,
        default_services,
        recorder,
        kill_leader_of(s.EVENTS_STREAM),
        load=SOAK,
        trigger=0.3,
        before=before,
        after=after,
    )
    print(f"soak wall {time.monotonic() - t:.0f}s")
    assert result.ok, f"{result.message()}\n\n{default_services.output(tail=2000)}"
