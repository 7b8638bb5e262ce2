"""The harness itself works: the cluster forms, replicated streams fail over and keep their
messages, nodes restart and pause, the recorder counts, services run an execution."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
from nats.js.api import StorageType, StreamConfig

from tests.cluster.harness import (
    NODE_NAMES,
    NatsCluster,
    Recorder,
    Services,
    client,
    close_client,
    commands_left,
    finish_all,
    read_events,
    recorder_loop_playbook,
    retrying,
    submit,
    terminal_events_per_run,
)

pytestmark = [pytest.mark.slow, pytest.mark.cluster]


async def _r3_stream(js, name: str = "HARNESS_T") -> None:
    cfg = StreamConfig(name=name, subjects=[f"{name.lower()}.>"], num_replicas=3, storage=StorageType.FILE)
    await retrying(lambda: js.add_stream(cfg), 10)


async def _publish(js, msg_id: str) -> None:
    """Repeated while the stream elects a leader; the id keeps one copy of a repeated publish."""
    await retrying(lambda: js.publish("harness_t.x", msg_id.encode(), headers={"Nats-Msg-Id": msg_id}), 20)


async def _messages(js, stream: str) -> int:
    return int((await retrying(lambda: js.stream_info(stream), 20)).state.messages)


def test_cluster_forms(nats_cluster: NatsCluster) -> None:
    assert nats_cluster.running() == list(NODE_NAMES)
    assert len(set(nats_cluster.urls)) == 3 and all(
        u.startswith("nats://127.0.0.1:") for u in nats_cluster.urls
    )
    assert nats_cluster.url_list == ",".join(nats_cluster.urls)
    assert {nats_cluster.healthz(n) for n in NODE_NAMES} == {200}
    leaders = {nats_cluster.meta_leader(n) for n in NODE_NAMES}
    assert len(leaders) == 1 and leaders <= set(NODE_NAMES)
    conf = nats_cluster.node("n1").config.read_text()
    assert "server_name" in conf and "noetl-test" in conf and "store_dir" in conf


async def test_r3_stream_fails_over_keeps_messages_and_the_node_comes_back(nats_cluster: NatsCluster) -> None:
    nc = await client(nats_cluster.urls, ensure_replicas=None)
    try:
        js = nc.jetstream()
        await _r3_stream(js)
        leader = await nats_cluster.wait_leader(js, "HARNESS_T", 10)
        assert leader in NODE_NAMES
        info = await retrying(lambda: js.stream_info("HARNESS_T"), 10)
        assert info.config.num_replicas == 3 and len(info.cluster.replicas) == 2
        for i in range(100):
            await _publish(js, f"m{i}")

        t0 = time.monotonic()
        await asyncio.to_thread(nats_cluster.kill, leader)
        assert leader not in nats_cluster.running()
        new = await nats_cluster.wait_leader(js, "HARNESS_T", 20, not_on=leader)
        assert new != leader and new in NODE_NAMES and time.monotonic() - t0 < 20
        assert await _messages(js, "HARNESS_T") == 100
        await _publish(js, "after")

        await asyncio.to_thread(nats_cluster.restart, leader)
        assert nats_cluster.running() == list(NODE_NAMES) and nats_cluster.healthz(leader) == 200

        async def caught_up() -> None:
            info = await js.stream_info("HARNESS_T")
            back = [r for r in info.cluster.replicas or [] if r.name == leader]
            assert info.cluster.leader == leader or (back and back[0].current), info.cluster

        await retrying(caught_up, 20)
        assert await _messages(js, "HARNESS_T") == 101
    finally:
        await close_client(nc)


async def test_a_paused_node_loses_its_leadership_and_comes_back(nats_cluster: NatsCluster) -> None:
    nc = await client(nats_cluster.urls, ensure_replicas=None)
    try:
        js = nc.jetstream()
        await _r3_stream(js)
        leader = await nats_cluster.wait_leader(js, "HARNESS_T", 10)
        await _publish(js, "before")
        nats_cluster.pause(leader)
        assert nats_cluster.node(leader).paused and await asyncio.to_thread(nats_cluster.healthz, leader) == 0
        new = await nats_cluster.wait_leader(js, "HARNESS_T", 20, not_on=leader)
        assert new != leader
        await _publish(js, "during")
        nats_cluster.resume(leader)
        assert not nats_cluster.node(leader).paused

        async def healthy() -> None:
            assert await asyncio.to_thread(nats_cluster.healthz, leader) == 200

        await retrying(healthy, 20)
        assert await _messages(js, "HARNESS_T") == 2
    finally:
        await close_client(nc)


def test_close_stops_a_paused_node_and_removes_the_store() -> None:
    c = NatsCluster().start()
    procs = [c.node(n).proc for n in NODE_NAMES]
    c.pause("n2")
    c.close()
    assert all(p is not None and p.poll() is not None for p in procs)
    assert not c.base.exists()


def test_recorder_counts_posts() -> None:
    r = Recorder()
    try:
        for body in [{"execution": "a", "i": 0}, {"execution": "a", "i": 1}, {"execution": "b", "i": 0}]:
            req = urllib.request.Request(
                r.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert resp.status == 200 and json.loads(resp.read()) == {"ok": True}
        assert len(r.records) == 3 and r.records[0] == {"execution": "a", "i": 0}
        assert r.count_by("execution") == {"a": 2, "b": 1}
        assert r.count_by_keys("execution", "i")[("a", 1)] == 1
    finally:
        r.close()


async def test_services_run_the_recorder_loop_through_one_node(
    nats_cluster: NatsCluster, recorder: Recorder
) -> None:
    """The service helpers, the playbook and the counting helpers, with every service on one node
    URL (works before services accept the cluster's URL list) and single-copy streams (so it does
    not depend on the services riding out the moment a just-created R3 stream has no leader)."""
    svc = Services(nats_cluster.urls[0], ack_wait=10, env={"NOETL_REPLICAS": "1"})
    nc = await client(nats_cluster.urls, ensure_replicas=1)
    try:
        svc.server()
        worker = svc.worker(concurrency=4)
        eid = await submit(nc, recorder_loop_playbook(6, 3), payload={"recorder": recorder.url})
        done, stuck = await finish_all(nc, [eid], 30)
        assert not stuck, f"not finished in 30 s; POSTs {len(recorder)}\n{svc.output()}"
        out = done[eid]
        assert out["status"] == "success", svc.output()
        assert out["result"] == {"n": 6, "s": 15}
        assert recorder.count_by_keys("execution", "i") == {(eid, i): 1 for i in range(6)}
        terminal = terminal_events_per_run(await read_events(nc.jetstream(), eid))
        assert len(terminal) == 6 + 1 and set(terminal.values()) == {1}  # 6 iterations, `total`
        assert await commands_left(nc.jetstream()) == 0
        assert await asyncio.to_thread(svc.terminate, worker) == 0
        assert svc.alive("worker") == [] and len(svc.alive("server")) == 1
        assert "proc-0-server.log" in svc.output()
    finally:
        await close_client(nc)
        svc.close()
