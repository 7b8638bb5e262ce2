"""High availability: what three replicas cost, and how long a dead server replica's work waits.

- **R3 vs R1**: the parallel noop loop of ``loop``'s ``par64`` variant (``max_in_flight`` 64, a
  snapshot per iteration) on one nats-server with one copy of every stream (``R1``, what every
  other scenario measures) and on a 3-node JetStream cluster on loopback with
  ``NOETL_REPLICAS=3`` (``R3``), a server and a worker given the comma-separated list of the
  three nodes' URLs. Both deployments stay up for the whole part and their runs alternate, so
  ``r3_over_r1`` compares runs made seconds apart on the same (shared) machine.
- **Takeover**: on the same 3-node cluster, two ``noetl server`` replicas (the lease TTL at its
  default unless ``NOETL_LEASE_TTL`` is set) and one worker. Once the 8 partition leases
  (``p0``..``p7`` in the KV bucket ``noetl_leases``) are split 4/4, one replica is SIGKILLed and
  a one-step execution whose partition that replica owned is submitted at once.
  ``takeover_s``: kill → every lease owned by the survivor (the KV read every 50 ms);
  ``kill_to_finished_s``: kill → that execution's ``workflow.finished``;
  ``kill_to_request_recorded_s``: kill → its ``playbook.execution.requested`` (the request
  handled, by the wall-clock timestamp of that event), which tells a wait for the request from a
  wait for the partition. Each further run starts a fresh replica in place of the killed one and
  waits for the 4/4 split again.

The 3-node cluster is ``tests/cluster/harness.py``'s ``NatsCluster``: the benchmark runs from a
checkout (``python -m bench`` at its root), where ``tests`` is importable, as the node-loss tests
use it. Every process started here (nodes, servers, worker) is stopped at the end, failed or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from bench import playbooks
from bench.cluster import Cluster, Service
from bench.common import FinishWatch, new_request, submit, ts
from bench.config import Sizes
from bench.record import Recorder
from noetl.events import subjects as s
from noetl.events.envelope import dumps
from noetl.events.ids import execution_id_for

NAME = "ha"
PARTITIONS = s.DEFAULT_PARTITIONS
MAX_IN_FLIGHT = 64
POLL = 0.05  # s between reads of the lease keys while waiting for the takeover


async def _loop_rate(c: Cluster, watch: FinishWatch, text: str, n: int, *, warm: bool = False) -> float:
    """Iterations per second of one loop execution, request publish → ``workflow.finished``."""
    req = new_request(text, {"n": 20} if warm else None)
    eid = execution_id_for(req["request_id"])
    done = watch.expect(eid)
    t0 = time.perf_counter()
    await (await submit(c.nc.jetstream(), req))
    await asyncio.wait_for(done, timeout=max(120.0, n / 20))
    return (20 if warm else n) / (watch.succeeded(eid) - t0)


async def _throughput(rec: Recorder, sizes: Sizes, runs: int, urls: list[str]) -> None:
    from tests.cluster.harness import wait_all_leaders

    n = sizes.loop_parallel
    text = playbooks.loop(n, parallel=True, max_in_flight=MAX_IN_FLIGHT)
    conc = sizes.worker_concurrency
    async with (
        Cluster(concurrency=conc) as r1,
        Cluster(concurrency=conc, nats_urls=urls, replicas=3) as r3,
    ):
        await wait_all_leaders(r3.nc.jetstream(), timeout=30)
        watches = [await FinishWatch(r1.nc).start(), await FinishWatch(r3.nc).start()]
        for c, w in zip((r1, r3), watches, strict=True):
            await _loop_rate(c, w, text, n, warm=True)
        for _ in range(runs):  # alternating, so both see the same load on the machine
            a = await _loop_rate(r1, watches[0], text, n)
            b = await _loop_rate(r3, watches[1], text, n)
            rec.add(NAME, "r1_iter_per_s", a, "it/s", higher=True)
            rec.add(NAME, "r3_iter_per_s", b, "it/s", higher=True)
            rec.add(NAME, "r3_over_r1", b / a, "x", higher=True)
        for w in watches:
            await w.stop()
    rec.note(
        NAME,
        f"loop: {n} iterations, max_in_flight {MAX_IN_FLIGHT}, a snapshot per iteration, 1 server + "
        f"1 worker (--concurrency {conc}); R1 = one nats-server, R3 = 3-node cluster on loopback "
        "with NOETL_REPLICAS=3; runs alternate between the two",
    )


def _pid_of(member: str) -> int | None:
    """A member id is ``<host>-<pid>-<6 hex>`` (``noetl.events.runtime.process_id``)."""
    parts = member.rsplit("-", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


async def _owners(kv: Any) -> dict[int, int | None]:
    """Partition → pid of the server replica holding its lease (absent keys left out)."""

    async def one(p: int) -> tuple[int, int | None] | None:
        try:
            entry = await asyncio.wait_for(kv.get(f"p{p}"), 2)
        except Exception:  # absent, deleted, or a slow answer: not owned as far as we know
            return None
        if not entry.value:
            return None
        return p, _pid_of(str(json.loads(entry.value).get("owner", "")))

    got = await asyncio.gather(*(one(p) for p in range(PARTITIONS)))
    return dict(g for g in got if g is not None)


async def _wait_split(kv: Any, servers: list[Service], timeout: float) -> dict[int, int | None]:
    """Until every lease is held and the live replicas hold equal shares."""
    pids = {svc.proc.pid for svc in servers}
    share = PARTITIONS // len(pids)
    deadline = time.monotonic() + timeout
    owners: dict[int, int | None] = {}
    while time.monotonic() < deadline:
        owners = await _owners(kv)
        held = list(owners.values())
        if len(owners) == PARTITIONS and all(held.count(pid) == share for pid in pids):
            return owners
        await asyncio.sleep(0.1)
    raise TimeoutError(f"leases not split between pids {sorted(pids)} within {timeout} s: {owners}")


async def _wait_owned_by(kv: Any, pid: int, t_kill: float, timeout: float) -> float:
    """Seconds from ``t_kill`` until every lease is held by ``pid``."""
    deadline = t_kill + timeout
    while time.perf_counter() < deadline:
        owners = await _owners(kv)
        t = time.perf_counter()
        if len(owners) == PARTITIONS and all(o == pid for o in owners.values()):
            return t - t_kill
        await asyncio.sleep(POLL)
    raise TimeoutError(f"the survivor (pid {pid}) did not hold every lease {timeout} s after the kill")


def _request_in(partitions: list[int], text: str) -> dict[str, Any]:
    """A one-step request whose execution lands in one of ``partitions``."""
    while True:
        req = new_request(text)
        if s.partition_of(execution_id_for(req["request_id"]), PARTITIONS) in partitions:
            return req


async def _takeover(rec: Recorder, sizes: Sizes, runs: int, urls: list[str]) -> None:
    from tests.cluster.harness import read_events, retrying, wait_all_leaders

    text = playbooks.one_step()
    async with Cluster(concurrency=sizes.worker_concurrency, nats_urls=urls, replicas=3, servers=2) as c:
        js = c.nc.jetstream()
        await wait_all_leaders(js, timeout=30)
        kv = await js.key_value(s.LEASES_BUCKET)
        ttl = float((await js.stream_info(f"KV_{s.LEASES_BUCKET}")).config.max_age or 0)
        watch = await FinishWatch(c.nc).start()

        async def one_step(req: dict[str, Any], timeout: float) -> float:
            """Publish (repeated with the same id through an election) and wait; finish time."""
            eid = execution_id_for(req["request_id"])
            done = watch.expect(eid)
            data, hdr = dumps(req), {"Nats-Msg-Id": req["request_id"]}
            await retrying(lambda: js.publish(s.REQUEST_SUBJECT, data, headers=hdr), 10)
            await asyncio.wait_for(done, timeout)
            return watch.succeeded(eid)

        for i in range(runs):
            if i:  # a fresh replica in place of the one killed last time
                await asyncio.to_thread(c.add_server().wait_ready)
            alive = [svc for svc in c.server_procs if svc.proc.poll() is None]
            owners = await _wait_split(kv, alive, timeout=max(30.0, 3 * ttl))
            victim, survivor = alive
            theirs = sorted(p for p, pid in owners.items() if pid == victim.proc.pid)
            await one_step(_request_in(theirs, text), 30)  # its partitions answer before the kill
            req = _request_in(theirs, text)
            t_kill, wall_kill = time.perf_counter(), time.time()
            victim.proc.kill()
            finished = asyncio.create_task(one_step(req, ttl + 60))
            try:
                takeover = await _wait_owned_by(kv, survivor.proc.pid, t_kill, ttl + 60)
                t_done = await finished
            finally:
                finished.cancel()
                with contextlib.suppress(BaseException):
                    await finished
            await asyncio.to_thread(victim.proc.wait)
            rec.add(NAME, "lease_ttl", ttl, "s")
            rec.add(NAME, "takeover_s", takeover, "s")
            rec.add(NAME, "kill_to_finished_s", t_done - t_kill, "s")
            # which wait it was: the request's (recorded by the survivor) or the partition's
            events = await read_events(js, execution_id_for(req["request_id"]))
            recorded = [ts(e) for e in events if e.get("name") == "playbook.execution.requested"]
            if recorded:
                rec.add(NAME, "kill_to_request_recorded_s", min(recorded) - wall_kill, "s")
        await watch.stop()
    rec.note(
        NAME,
        f"takeover: 2 server replicas + 1 worker on the 3-node cluster (R3), lease TTL {ttl:g} s; "
        f"one replica SIGKILLed once the {PARTITIONS} leases were split 4/4, a one-step execution "
        "in one of its partitions submitted right after the kill",
    )


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    # bench runs from a checkout: the node-loss tests' 3-node cluster on loopback
    from tests.cluster.harness import NatsCluster

    nats = NatsCluster()
    try:
        await asyncio.to_thread(nats.start)
        for label, part in (("R3 vs R1", _throughput), ("takeover", _takeover)):
            try:  # a failed part leaves a note, not a hole in the other
                await part(rec, sizes, runs, nats.urls)
            except Exception as e:
                rec.note(NAME, f"{label} failed: {type(e).__name__}: {e}")
    finally:
        await asyncio.to_thread(nats.close)
