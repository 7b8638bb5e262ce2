"""Partition leases on a real nats-server: even spread, hand-over on stop, takeover after a crash,
no overlap in validity, and overlapping deciders that still produce one decision each."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.bus import connect, read_execution_events
from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import NatsServer
from noetl.server.leases import DEFAULT_TTL, PartitionLeases
from noetl.server.service import Server
from noetl.worker.service import Worker

TTL = 2.0


def _leases(nc: Any, member: str, log: list[tuple[str, str, int]], others: dict[str, PartitionLeases]):
    async def acquired(p: int) -> None:
        # the moment a replica takes p, no other may still believe it holds p
        holders = [m for m, other in others.items() if m != member and other.valid(p)]
        log.append(("acquire", member, p))
        log.extend(("overlap:" + m, member, p) for m in holders)

    async def released(p: int) -> None:
        log.append(("release", member, p))

    pl = PartitionLeases(NatsBus(nc), member, 8, on_acquire=acquired, on_release=released, ttl=TTL)
    others[member] = pl
    return pl


async def _until(cond: Any, timeout: float) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    while not cond():
        if loop.time() - start > timeout:
            raise TimeoutError
        await asyncio.sleep(0.05)
    return loop.time() - start


async def test_two_replicas_split_hand_over_and_take_over(fresh_nats: NatsServer) -> None:
    nc = await connect(fresh_nats.url)
    log: list[tuple[str, str, int]] = []
    others: dict[str, PartitionLeases] = {}
    a, b = _leases(nc, "a", log, others), _leases(nc, "b", log, others)
    try:
        await a.start()
        assert a.owned == list(range(8))  # alone: everything, before start() returns
        await b.start()
        await _until(lambda: len(a.owned) == 4 and len(b.owned) == 4, 5)
        assert sorted(a.owned + b.owned) == list(range(8)), (a.owned, b.owned)
        # a graceful stop hands over at once, not after the TTL
        took = await asyncio.gather(a.stop(), _until(lambda: len(b.owned) == 8, 3 * TTL))
        assert took[1] < TTL, f"hand-over took {took[1]:.2f} s; the TTL is {TTL} s"
        # a crash: b stops renewing; c takes everything only after b's leases ran out
        c = _leases(nc, "c", log, others)
        await c.start()
        await _until(lambda: len(c.owned) == 4, 5)
        await b.crash()
        waited = await _until(lambda: len(c.owned) == 8, 4 * TTL)
        assert waited <= TTL + 2.5, f"takeover after a crash took {waited:.2f} s (TTL {TTL} s)"
        assert not any(b.valid(p) for p in range(8))
        await c.stop()
    finally:
        for pl in others.values():
            await pl.crash()
        await nc.close()
    acquired = Counter(p for what, _, p in log if what == "acquire")
    assert set(acquired) == set(range(8)), log
    assert not [x for x in log if x[0].startswith("overlap")], log


async def test_a_replica_that_cannot_renew_stops_before_the_key_expires(fresh_nats: NatsServer) -> None:
    """Renewals lost (a cut-off replica): validity ends before the key can expire and be taken."""
    nc = await connect(fresh_nats.url)
    log: list[tuple[str, str, int]] = []
    others: dict[str, PartitionLeases] = {}
    a = _leases(nc, "a", log, others)
    try:
        await a.start()
        await a.crash()  # no more renewals, but a still holds its local validity for a while
        assert all(a.valid(p) for p in range(8))
        b = _leases(nc, "b", log, others)
        await b.start()  # the assertion inside on_acquire checks a.valid(p) at each takeover
        await _until(lambda: len(b.owned) == 8, 4 * TTL)
        await b.stop()
    finally:
        for pl in others.values():
            await pl.crash()
        await nc.close()
    assert not [x for x in log if x[0].startswith("overlap")], log


LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: overlap, path: tests/overlap}
workflow:
  - step: start
    loop: {in: "{{ range(20) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 5}}
    tool: {kind: python, args: {i: "{{ iter.i }}"}, code: "def main(i):\\n    return i * 2"}
    next:
      arcs:
        - step: total
          when: "{{ event.name == 'loop.done' }}"
          args: {s: "{{ event.result | sum }}"}
  - step: total
    tool: {kind: noop, result: "{{ args.s }}"}
"""


async def test_two_servers_deciding_the_same_partitions_decide_once(fresh_nats: NatsServer) -> None:
    """The overlap a lease hand-over can leave (the old owner still storing what it decided) at its
    worst: two servers decide every input of every partition. Deterministic ids keep one copy."""
    nc = await connect(fresh_nats.url)
    servers = [Server(NatsBus(nc), partitions=4, owned=[0, 1, 2, 3]) for _ in range(2)]
    worker = Worker(NatsBus(nc), concurrency=8)
    try:
        for srv in servers:
            await srv.start()
        await worker.start()
        requests = [{"request_id": uuid.uuid4().hex, "playbook": LOOP} for _ in range(4)]
        outs = await asyncio.gather(*(run_and_wait(NatsBus(nc), r, timeout=60) for r in requests))
        for out in outs:
            assert out["status"] == "success" and out["result"] == sum(i * 2 for i in range(20)), out
            events = await read_execution_events(NatsBus(nc), out["execution_id"])
            scheduled = Counter(e["step_run_id"] for e in events if e["name"] == "step.scheduled")
            terminal = Counter(
                (e["step_run_id"], (e.get("payload") or {}).get("index"))
                for e in events
                if e["name"] in ("step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed")
            )
            finished = [e for e in events if e["name"] == "workflow.finished"]
            assert set(scheduled.values()) == {1}, f"step runs scheduled twice: {scheduled}"
            assert len(terminal) == 21 and set(terminal.values()) == {1}, f"terminal events: {terminal}"
            assert len(finished) == 1, f"{len(finished)} workflow.finished events"
        assert all(srv.decided > 0 for srv in servers), [srv.decided for srv in servers]
    finally:
        await worker.stop(drain=False)
        for srv in servers:
            await srv.stop()
        await nc.close()


async def test_partition_count_is_fixed_once_recorded(fresh_nats: NatsServer) -> None:
    from noetl.dsl.errors import DeploymentError

    nc = await connect(fresh_nats.url)
    try:
        first = Server(NatsBus(nc), partitions=4, leases=False)
        await first.start()
        await first.stop()
        again = Server(NatsBus(nc))  # no count given: the recorded one
        await again.start()
        assert again.partitions == 4 and again.owned == [0, 1, 2, 3]
        await again.stop()
        wrong = Server(NatsBus(nc), partitions=6)
        try:
            await wrong.start()
        except DeploymentError as e:
            assert "--partitions 4" in e.message and s.SERVER_BUCKET in e.message, e.message
        else:
            raise AssertionError("a server with another partition count started")
        finally:
            await wrong.stop()
    finally:
        await nc.close()


async def test_the_bucket_ttl_is_the_one_every_replica_trusts(fresh_nats: NatsServer) -> None:
    """A changed NOETL_LEASE_TTL changes the bucket; a replica started with a longer TTL never
    counts on more than the bucket keeps a lease."""
    nc = await connect(fresh_nats.url)
    log: list[tuple[str, str, int]] = []
    others: dict[str, PartitionLeases] = {}
    a = _leases(nc, "a", log, others)
    a.ttl = a.configured_ttl = 3.0
    try:
        await a.start()
        b = _leases(nc, "b", log, others)  # TTL 2 s
        await b.start()
        info = await nc.jetstream().stream_info(f"KV_{s.LEASES_BUCKET}")
        assert info.config.max_age == TTL
        await _until(lambda: a.ttl == TTL, 5)
    finally:
        for pl in others.values():
            await pl.crash()
        await nc.close()


# 0.92 TTL (5.5 s) right after a renewal: past the lease's validity (TTL - margin, 5.1 s), before
# the bucket expires the key (6 s): the window in which the loops ended and nothing restarted them
@pytest.mark.parametrize("pause_ttls", [0.8, 0.92, 2.0])
async def test_a_server_paused_around_its_lease_decides_again(
    fresh_nats: NatsServer, pause_ttls: float
) -> None:
    """A pause of the whole process (a GC pause, CPU starvation, a VM stall: here the event loop
    blocked) of about the lease's length, at the default TTL. Before the fix the partition loops
    saw the lease invalid for an instant and ended, the next round renewed the lease, and nothing
    started them again: the server never decided another input."""
    nc = await connect(fresh_nats.url)
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=4)
    try:
        await server.start()
        await worker.start()
        assert server.leases is not None and server.leases.ttl == DEFAULT_TTL
        first = await run_and_wait(
            NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": LOOP}, timeout=30
        )
        assert first["status"] == "success", first
        await _just_renewed(server.leases)
        time.sleep(pause_ttls * DEFAULT_TTL)  # the pause under test: the event loop blocked
        requests = [{"request_id": uuid.uuid4().hex, "playbook": LOOP} for _ in range(4)]
        runs = (run_and_wait(NatsBus(nc), r, timeout=40) for r in requests)
        outs = await asyncio.gather(*runs, return_exceptions=True)
        statuses = Counter("stuck" if isinstance(o, TimeoutError) else o["status"] for o in outs)
        assert statuses == {"success": 4}, f"after a pause of {pause_ttls} TTL: {dict(statuses)} of 4"
        live = await _until_value(lambda: server.liveness(), lambda v: not v["partitions_without_reader"], 20)
        assert live["partitions_owned"] == list(range(8)), live
    finally:
        await worker.stop(drain=False)
        await server.stop()
        await nc.close()


async def _just_renewed(leases: PartitionLeases) -> None:
    """Returns right after a renewal of every lease, so a pause's length decides what it outlasts."""
    before = dict(leases._valid_until)
    while any(leases._valid_until.get(p) == v for p, v in before.items()):
        await asyncio.sleep(0.01)


async def _until_value(get: Any, ok: Any, timeout: float) -> Any:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    value = get()
    while not ok(value):
        assert loop.time() < deadline, f"still {value} after {timeout} s"
        await asyncio.sleep(0.1)
        value = get()
    return value
