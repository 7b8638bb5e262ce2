"""Timers and schedules survive killed servers (SEMANTICS §16, §18): they live in JetStream, not in
a server's memory. Real processes: a nats-server with a file store and `noetl server` / `noetl
worker` subprocesses that the tests SIGKILL."""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from datetime import datetime
from typing import Any

import pytest

from noetl.client.run import finished_event, submit
from noetl.events import subjects as s
from noetl.events.bus import read_execution_events, read_messages
from noetl.store.catalog import Catalog
from noetl.store.schedules import ScheduleStore
from tests.faults.harness import Cluster, client

pytestmark = pytest.mark.slow

FAST_LEASES = {"NOETL_LEASE_TTL": "2"}

HANG = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hang, path: faults/hang}
workflow:
  - step: start
    spec: {policy: {lifecycle: {timeout_s: 4}}}
    tool:
      - name: hang
        kind: python
        code: |
          import time
          def main():
              time.sleep(60)
    next:
      arcs:
        - {step: late, when: "{{ event.name == 'step.failed' and event.error.kind == 'step_timeout' }}"}
  - step: late
    tool: {kind: noop, result: routed}
"""

TICK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tick, path: faults/tick}
workflow:
  - step: start
    tool: {kind: noop, result: tick}
"""


def _server(cluster: Cluster) -> Any:
    return cluster._spawn("server", "--http-port", "-1", env=FAST_LEASES)


async def _until(what: Any, timeout: float, cluster: Cluster) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await what()
        if got:
            return got
        await asyncio.sleep(0.1)
    raise AssertionError("timed out\n" + cluster.output())


async def test_a_timer_fires_after_the_server_is_killed_and_restarted(cluster: Cluster) -> None:
    """SIGKILL the only server after the step's timer is armed, start a new one before it is due:
    the timer fires all the same, the step fails with step_timeout and its arc routes it."""
    server = _server(cluster)
    cluster.worker()
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        eid = await submit(js, {"request_id": uuid.uuid4().hex, "playbook": HANG, "payload": {}})

        async def started() -> bool:
            return any(e["name"] == "step.started" for e in await read_execution_events(js, eid))

        await _until(started, 30, cluster)
        assert cluster.kill(server) == -9
        await asyncio.sleep(0.5)
        _server(cluster)
        fin = await _until(lambda: finished_event(js, eid), 30, cluster)
        assert fin["payload"]["status"] == "success" and fin["payload"]["result"] == "routed"
        events = await read_execution_events(js, eid)
        assert [e["name"] for e in events].count("timer.fired") == 1
        failed = [e for e in events if e["name"] == "step.failed" and e["source"] == "server"]
        assert failed[0]["payload"]["error"]["kind"] == "step_timeout"
    finally:
        await nc.close()


async def test_a_schedule_fires_once_per_due_time_with_two_replicas_one_killed(cluster: Cluster) -> None:
    """A schedule every 2 s, two server replicas; one is SIGKILLed half-way. Every due time from the
    first fire to the last starts exactly one execution: none twice, none skipped."""
    first = _server(cluster)
    _server(cluster)
    cluster.worker()
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        await (await Catalog.open(js)).register(TICK)
        store = await ScheduleStore.open(js)
        sch = await store.add("tick", path="faults/tick", cron="*/2 * * * * *", timezone="Europe/Paris")
        assert "error" not in sch, sch
        await asyncio.sleep(5)
        assert cluster.kill(first) == -9
        await asyncio.sleep(7)
        await store.delete("tick")
        await asyncio.sleep(1.5)  # the last fire's execution is recorded

        requested = [
            ev
            for _, ev in await read_messages(
                js, s.EVENTS_STREAM, [s.execution_event_filter("*", "playbook.execution.requested")]
            )
            if (ev.get("payload") or {}).get("schedule") == "tick"
        ]
        per_execution = Counter(ev["execution_id"] for ev in requested)
        assert per_execution and max(per_execution.values()) == 1, per_execution
        due = sorted(datetime.fromisoformat(ev["payload"]["request_id"].split(".", 2)[2]) for ev in requested)
        assert len(due) >= 5, (due, cluster.output())
        gaps = {(b - a).total_seconds() for a, b in itertools.pairwise(due)}
        assert gaps == {2.0}, (due, cluster.output())
        for eid in per_execution:
            fin = await _until(lambda e=eid: finished_event(js, e), 15, cluster)
            assert fin["payload"]["status"] == "success"
    finally:
        await nc.close()
