"""Killing any part of the system loses nothing. Each test names what it kills and what it asserts.

Real processes: a nats-server with a file store, `noetl server` and `noetl worker` subprocesses.
Leases are 2 s here (NOETL_ACK_WAIT) so a killed worker's commands come back quickly."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from typing import Any

import pytest

from noetl.client.run import complete_log, wait_finished
from noetl.client.view import execution_output
from noetl.events import subjects as s
from noetl.events.envelope import dumps
from noetl.events.ids import execution_id_for
from noetl.events.nats_port import NatsBus
from tests.faults.harness import Cluster, client, count_events

pytestmark = pytest.mark.slow

PARALLEL_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: fault_loop, path: faults/loop}
workflow:
  - step: start
    loop:
      in: "{{ range(200) | list }}"
      iterator: i
      spec: {mode: parallel, max_in_flight: 20}
    tool:
      - name: work
        kind: python
        args: {i: "{{ iter.i }}"}
        code: |
          import time
          def main(i):
              time.sleep(0.05)
              return i
    next:
      arcs:
        - step: total
          when: "{{ event.name == 'loop.done' }}"
          args: {n: "{{ event.result | length }}", s: "{{ event.result | sum }}"}
  - step: total
    tool: {kind: noop, result: "{{ args }}"}
"""


def chain(n: int, sleep: float) -> str:
    steps = []
    for i in range(n):
        nxt = f"\n    next: {{arcs: [{{step: s{i + 1}}}]}}" if i < n - 1 else ""
        name = "start" if i == 0 else f"s{i}"
        steps.append(
            f"  - step: {name}\n    tool:\n      - name: t\n        kind: python\n"
            f"        code: |\n          import time\n          def main():\n"
            f"              time.sleep({sleep})\n              return {i}{nxt}"
        )
    head = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: chain, path: faults/chain}\n"
    return head + "workflow:\n" + "\n".join(steps) + "\n"


async def submit(nc: Any, playbook: str | None = None, *, path: str | None = None) -> str:
    """A request for the playbook text, or for a catalog playbook by ``path``."""
    rid = uuid.uuid4().hex
    body = {"request_id": rid, "path": path} if path else {"request_id": rid, "playbook": playbook}
    await nc.jetstream().publish(s.REQUEST_SUBJECT, dumps(body), headers={"Nats-Msg-Id": rid})
    return execution_id_for(rid)


async def finish(nc: Any, execution_id: str, timeout: float = 90) -> dict[str, Any]:
    await wait_finished(NatsBus(nc), execution_id, timeout)
    # the notification can come before the stream shows the last events: read until it does
    return execution_output(execution_id, await complete_log(NatsBus(nc), execution_id))


async def test_sigkill_worker_mid_parallel_loop(cluster: Cluster) -> None:
    """Kills: the only worker, with SIGKILL, after ~50 of 200 parallel iterations finished.
    Asserts: a new worker finishes the loop; every iteration has exactly one loop.iteration.done."""
    cluster.server()
    first = cluster.worker(concurrency=20)
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, PARALLEL_LOOP)
        await count_events(nc, eid, "loop.iteration.done", lambda n: n >= 50)
        cluster.kill(first)
        cluster.worker(concurrency=20)
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    done = Counter(e["payload"]["index"] for e in out["events"] if e["name"] == "loop.iteration.done")
    assert sorted(done) == list(range(200)) and set(done.values()) == {1}
    assert out["result"] == {"n": 200, "s": sum(range(200))}


async def test_sigkill_server_mid_execution(cluster: Cluster) -> None:
    """Kills: the server, with SIGKILL, after 10 of 40 sequential steps; starts a new server.
    Asserts: the execution resumes and succeeds; no step run is scheduled twice; each step ran once."""
    cluster.worker()
    first = cluster.server()
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, chain(40, 0.03))
        await count_events(nc, eid, "step.done", lambda n: n >= 10)
        cluster.kill(first)
        await asyncio.sleep(0.5)  # work finishes while no server runs: its events wait in the stream
        cluster.server()
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    scheduled = Counter(e["step_run_id"] for e in out["events"] if e["name"] == "step.scheduled")
    assert len(scheduled) == 40 and set(scheduled.values()) == {1}
    assert all(runs == [{"status": "done", "result": runs[0]["result"]}] for runs in out["steps"].values())
    assert out["result"] == 39


async def test_sigkill_server_mid_execution_of_a_playbook_over_1_mib(cluster: Cluster) -> None:
    """Kills: the server, with SIGKILL, after 5 of 20 steps of a 1.3 MB playbook (by path), whose
    text does not fit in an event: the request event names it by digest.
    Asserts: the new server rebuilds the execution, resolving the text from the catalog, and it
    succeeds; `noetl replay` of it (which resolves the same way) decides nothing differently."""
    from noetl.cli.analysis_run import read_events
    from noetl.cli.replay_diff import replay_diff
    from noetl.events.streams import ensure_all
    from noetl.store.catalog import MAX_MESSAGE_BYTES, Catalog

    text = chain(20, 0.03) + "".join(f"# filler {i:06d} {'x' * 80}\n" for i in range(14_000))
    assert len(text.encode()) > MAX_MESSAGE_BYTES
    cluster.worker()
    first = cluster.server()
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        await ensure_all(js)
        await (await Catalog.open(NatsBus.of(js))).register(text, "big.yaml")
        eid = await submit(nc, path="faults/chain")
        await count_events(nc, eid, "step.done", lambda n: n >= 5)
        cluster.kill(first)
        cluster.server()
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    assert out["result"] == 19
    requested = next(e for e in out["events"] if e["name"] == "playbook.execution.requested")
    assert "playbook" not in requested["payload"] and requested["payload"]["digest"]
    assert replay_diff(await read_events(cluster.url, eid)).divergences == []


async def test_restart_nats_server_mid_execution(cluster: Cluster) -> None:
    """Kills: nats-server itself (SIGKILL), restarted on the same port and store dir.
    Asserts: server and worker reconnect and the execution succeeds with every step once."""
    cluster.server()
    cluster.worker()
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, chain(30, 0.05))
        await count_events(nc, eid, "step.done", lambda n: n >= 8)
        cluster.nats.kill()
        await asyncio.sleep(1.0)
        cluster.nats.start()
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    assert len(out["steps"]) == 30 and out["result"] == 29
    scheduled = Counter(e["step_run_id"] for e in out["events"] if e["name"] == "step.scheduled")
    assert set(scheduled.values()) == {1}


async def test_two_workers_share_a_pool_and_sigterm_drains(cluster: Cluster) -> None:
    """Stops: one of two workers with SIGTERM (graceful) in the middle of a parallel loop.
    Asserts: it exits cleanly after finishing what it runs; both did work; the loop succeeds."""
    cluster.server()
    a = cluster.worker(concurrency=10)
    cluster.worker(concurrency=10)
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, PARALLEL_LOOP)
        await count_events(nc, eid, "loop.iteration.done", lambda n: n >= 60)
        assert cluster.kill(a, signal.SIGTERM) == 0
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    workers = Counter(e["payload"].get("worker") for e in out["events"] if e["name"] == "loop.iteration.done")
    assert len(workers) == 2, workers
    done = Counter(e["payload"]["index"] for e in out["events"] if e["name"] == "loop.iteration.done")
    assert set(done.values()) == {1} and len(done) == 200


KILLER = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: killer, path: faults/killer}
workflow:
  - step: start
    next: {arcs: [{step: poison}]}
  - step: poison
    tool:
      - name: die
        kind: python
        code: |
          import os, signal
          def main():
              os.kill(os.getpid(), signal.SIGKILL)
    next:
      arcs:
        - step: handled
          when: "{{ event.name == 'step.failed' and event.error.kind == 'worker_lost' }}"
  - step: handled
    tool: {kind: noop, result: survived}
"""


async def test_a_command_that_keeps_killing_workers_ends_as_worker_lost(cluster: Cluster) -> None:
    """Kills: every worker that runs the poison task (the task SIGKILLs its own process).
    Asserts: after MaxDeliver deliveries (2 here) the step fails with worker_lost instead of
    killing workers forever, and an arc routes that failure."""
    cluster.server()
    env = {"NOETL_MAX_DELIVER": "2"}
    first = cluster._spawn("worker", "--concurrency", "4", env=env)
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, KILLER)
        assert await asyncio.to_thread(first.wait, 60) == -signal.SIGKILL
        cluster._spawn("worker", "--concurrency", "4", env=env)
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    (failed,) = out["steps"]["poison"]
    assert failed["status"] == "failed" and failed["error"]["kind"] == "worker_lost"
    assert out["result"] == "survived"


def local_loop(runs_file: str) -> str:
    """200 iterations of an ``exec: local`` loop; each run of the task appends its index to
    ``runs_file`` (events are de-duplicated by id, the task's runs are not: this counts them)."""
    return (
        PARALLEL_LOOP.replace(
            "spec: {mode: parallel, max_in_flight: 20}",
            "spec: {mode: parallel, max_in_flight: 20, policy: {exec: local}}",
        )
        .replace("faults/loop", "faults/local_loop")
        .replace(
            "              time.sleep(0.05)\n",
            f"              time.sleep(0.05)\n              open({runs_file!r}, 'a').write(f'{{i}}\\n')\n",
        )
    )


async def test_sigkill_worker_mid_local_loop_resumes_where_it_stopped(
    cluster: Cluster, tmp_path: Any
) -> None:
    """Kills: the only worker, with SIGKILL, after ~50 of 200 iterations of an ``exec: local`` loop
    (one command runs them all). Asserts: a new worker takes the redelivered command and runs only
    what had not ended (at most the 20 in flight at the kill run twice); every iteration has
    exactly one loop.iteration.done."""
    runs_file = tmp_path / "runs.txt"
    cluster.server()
    first = cluster.worker(concurrency=4)
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, local_loop(str(runs_file)))
        await count_events(nc, eid, "loop.iteration.done", lambda n: n >= 50)
        cluster.kill(first)
        cluster.worker(concurrency=4)
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    done = Counter(e["payload"]["index"] for e in out["events"] if e["name"] == "loop.iteration.done")
    twice = sorted(i for i, n in done.items() if n > 1)
    assert sorted(done) == list(range(200)) and not twice, f"{len(done)} iterations ended, twice: {twice}"
    assert out["result"] == {"n": 200, "s": sum(range(200))}
    runs = Counter(int(line) for line in runs_file.read_text().split())
    again = sum(n - 1 for n in runs.values())
    assert sorted(runs) == list(range(200)) and again <= 20, (
        f"{sum(runs.values())} task runs for 200 iterations: {again} ran again (at most the 20 in flight may)"
    )
    workers = {e["payload"].get("worker") for e in out["events"] if e["name"] == "loop.iteration.done"}
    assert len(workers) == 2, f"the iterations ran on {len(workers)} workers, not the killed one and the next"
