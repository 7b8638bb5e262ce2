"""Timers and schedules survive killed servers (SEMANTICS §16, §18): they live in JetStream, not in
a server's memory. Real processes: a nats-server with a file store and `noetl server` / `noetl
worker` subprocesses that the tests SIGKILL."""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import signal
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from noetl.client.run import finished_event, submit
from noetl.events import subjects as s
from noetl.events.bus import read_execution_events, read_messages
from noetl.events.nats_port import NatsBus
from noetl.store.catalog import Catalog
from noetl.store.schedules import ScheduleStore
from tests.faults.harness import Cluster, client
from tests.support import until

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


SLEEPY = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sleepy, path: faults/sleepy}
workflow:
  - step: start
    tool:
      - name: nap
        kind: python
        code: |
          import time
          def main():
              time.sleep(2.5)
              return "rested"
"""


def _server(cluster: Cluster, **env: str) -> Any:
    return cluster._spawn("server", "--http-port", "-1", env={**FAST_LEASES, **env})


async def _taking_fires(js: Any) -> bool:
    """A server is pulling from the schedule consumer: a fire from now on is taken at once."""
    try:
        info = await js.consumer_info(s.TIMERS_STREAM, s.SCHEDULES_CONSUMER)
    except Exception:  # not created yet: no server has started its schedule loop
        return False
    return bool(info.num_waiting)


async def _sleep_until(epoch: float) -> None:
    await asyncio.sleep(max(epoch - time.time(), 0))


async def _fired(js: Any, name: str) -> list[dict[str, Any]]:
    """The execution requests schedule ``name`` made, each with its due time (from its request id
    ``schedule.<name>.<due>``) and the time it was recorded."""
    out = []
    for _, ev in await read_messages(
        NatsBus.of(js), s.EVENTS_STREAM, [s.execution_event_filter("*", "playbook.execution.requested")]
    ):
        payload = ev.get("payload") or {}
        if payload.get("schedule") == name:
            due = datetime.fromisoformat(payload["request_id"].split(".", 2)[2])
            recorded = datetime.fromisoformat(ev["timestamp"].replace("Z", "+00:00"))
            out.append({"execution_id": ev["execution_id"], "due": due, "recorded": recorded})
    return out


async def _until(what: Any, timeout: float, cluster: Cluster) -> Any:
    try:
        return await until(what, timeout, every=0.1)
    except AssertionError:
        raise AssertionError("timed out\n" + cluster.output()) from None


async def test_a_timer_fires_after_the_server_is_killed_and_restarted(cluster: Cluster) -> None:
    """SIGKILL the only server after the step's timer is armed, start a new one before it is due:
    the timer fires all the same, the step fails with step_timeout and its arc routes it."""
    server = _server(cluster)
    cluster.worker()
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        eid = await submit(NatsBus.of(js), {"request_id": uuid.uuid4().hex, "playbook": HANG, "payload": {}})

        async def started() -> bool:
            return any(e["name"] == "step.started" for e in await read_execution_events(NatsBus.of(js), eid))

        await _until(started, 30, cluster)
        assert cluster.kill(server) == -9
        await asyncio.sleep(0.5)
        _server(cluster)
        fin = await _until(lambda: finished_event(NatsBus.of(js), eid), 30, cluster)
        assert fin["payload"]["status"] == "success" and fin["payload"]["result"] == "routed"
        events = await read_execution_events(NatsBus.of(js), eid)
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
        await (await Catalog.open(NatsBus.of(js))).register(TICK)
        store = await ScheduleStore.open(NatsBus.of(js))
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
                NatsBus.of(js),
                s.EVENTS_STREAM,
                [s.execution_event_filter("*", "playbook.execution.requested")],
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
            fin = await _until(lambda e=eid: finished_event(NatsBus.of(js), e), 15, cluster)
            assert fin["payload"]["status"] == "success"
    finally:
        await nc.close()


async def test_after_every_server_was_down_one_missed_fire_is_caught_up_then_fires_are_on_time(
    cluster: Cluster,
) -> None:
    """SEMANTICS §18, at most one catch-up. A schedule fires every second at B, B+1, then (every
    server stopped) at B+3, B+4, B+5, then at B+9, B+10, with a server again. Its seconds are listed
    so the restarted server is surely taking fires before B+9, however slowly it starts: the fire
    of B+5 is the one catch-up, B+3 and B+4 never run, B+9 and B+10 run on time."""
    server = _server(cluster)
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        await (await Catalog.open(NatsBus.of(js))).register(TICK)
        store = await ScheduleStore.open(NatsBus.of(js))
        await _until(lambda: _taking_fires(js), 30, cluster)
        base = math.ceil(time.time()) + 1
        offsets = {"before": (0, 1), "missed": (3, 4), "caught_up": (5,), "after": (9, 10)}
        seconds = sorted({(base + k) % 60 for ks in offsets.values() for k in ks})
        cron = ",".join(map(str, seconds)) + " * * * * *"
        sch = await store.add("catchup", path="faults/tick", cron=cron)
        assert "error" not in sch, sch

        await _sleep_until(base + 1.4)
        assert cluster.kill(server, signal.SIGTERM) == 0, cluster.output()
        assert time.time() < base + 2.9, f"the server took until B+{time.time() - base:.1f} s to stop"
        await _sleep_until(base + 5.4)
        waiting = (await js.consumer_info(s.TIMERS_STREAM, s.SCHEDULES_CONSUMER)).num_pending
        assert waiting == 1, f"{waiting} fires wait for the next server after 3 missed due times (want 1)"
        restarted = time.time()
        _server(cluster)
        await _sleep_until(base + 10.6)
        await store.delete("catchup")

        def at(k: int) -> datetime:
            return datetime.fromtimestamp(base + k, UTC)

        want = {at(k) for name in ("before", "caught_up", "after") for k in offsets[name]}

        async def all_recorded() -> list[dict[str, Any]]:
            fired = await _fired(js, "catchup")
            return fired if {f["due"] for f in fired} >= want else []

        fired = await _until(all_recorded, 5, cluster)
        per_due = Counter(f["due"] for f in fired)
        counts = {f"B+{(d - at(0)).total_seconds():g}": n for d, n in sorted(per_due.items())}
        assert set(per_due) == want and max(per_due.values()) == 1, (
            f"executions per due time {counts}; want one each at B, B+1, B+5, B+9, B+10 and none at "
            f"B+3, B+4\n{cluster.output()}"
        )
        late = {
            f"B+{(f['due'] - at(0)).total_seconds():g}": round((f["recorded"] - f["due"]).total_seconds(), 2)
            for f in fired
        }
        caught_up = next(f for f in fired if f["due"] == at(5))
        assert caught_up["recorded"].timestamp() > restarted, (
            f"B+5 was not run by the restarted server: {late}"
        )
        on_time = [late[f"B+{k}"] for k in (0, 1, 9, 10)]
        assert max(on_time) < 1.0, f"seconds from due time to execution request: {late}"
    finally:
        await nc.close()


async def test_overlap_skip_never_runs_two_executions_of_a_schedule_at_once(cluster: Cluster) -> None:
    """SEMANTICS §18, ``--overlap skip``: a schedule every second whose execution takes 2.5 s. No two
    of its executions overlap; every due time either started one or is skipped, and the skipped
    ones are visible: a log line each, and ``skipped`` / ``last_skipped`` in ``noetl schedule list``."""
    server = _server(cluster, NOETL_LOG_LEVEL="INFO")
    server_log = Path(cluster.logs[-1])
    cluster.worker()
    nc = await client(cluster.url)
    try:
        js = nc.jetstream()
        await (await Catalog.open(NatsBus.of(js))).register(SLEEPY)
        store = await ScheduleStore.open(NatsBus.of(js))
        await _until(lambda: _taking_fires(js), 30, cluster)
        sch = await store.add("sleepy", path="faults/sleepy", cron="* * * * * *", overlap="skip")
        assert "error" not in sch, sch
        await asyncio.sleep(7.5)
        await store.set_paused("sleepy", True)  # no fire after this; the counts below are final
        await asyncio.sleep(0.5)
        listed = next(x for x in await store.list() if x["name"] == "sleepy")
        await store.delete("sleepy")
        assert server.poll() is None, cluster.output()

        fired = await _fired(js, "sleepy")
        finished = {}
        for f in fired:
            fin = await _until(lambda e=f["execution_id"]: finished_event(NatsBus.of(js), e), 15, cluster)
            assert fin["payload"]["status"] == "success", fin
            finished[f["execution_id"]] = datetime.fromisoformat(fin["timestamp"].replace("Z", "+00:00"))
        runs = sorted((f["recorded"], finished[f["execution_id"]], f["due"]) for f in fired)
        overlaps = [(a[2], b[2]) for a, b in itertools.pairwise(runs) if b[0] < a[1]]
        assert not overlaps, f"{len(overlaps)} of {len(runs)} executions started before the previous ended"

        skipped_lines = re.findall(r"schedule sleepy: the fire due (\S+) is skipped", server_log.read_text())
        skipped = Counter(datetime.fromisoformat(d) for d in skipped_lines)
        ran = Counter(f["due"] for f in fired)
        summary = f"{len(ran)} due times ran, {len(skipped)} were skipped"
        assert len(ran) >= 2 and len(skipped) >= 2 and max(ran.values()) == 1, summary
        assert not set(ran) & set(skipped), f"{summary}; both ran and skipped: {set(ran) & set(skipped)}"
        first, last = min(ran | skipped), max(ran | skipped)
        every = {first + timedelta(seconds=k) for k in range(int((last - first).total_seconds()) + 1)}
        assert set(ran) | set(skipped) == every, f"{summary}; lost: {sorted(every - set(ran) - set(skipped))}"
        assert listed["skipped"] == len(skipped), f"{summary}, the schedule says {listed['skipped']} skipped"
        assert listed["last_skipped"] == max(skipped).isoformat(), listed
    finally:
        await nc.close()
