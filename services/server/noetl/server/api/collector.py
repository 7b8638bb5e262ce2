"""Feeds ``Metrics``: executions from the event log, step durations from the server's own work.

Executions are folded from the start of the stream by one ordered consumer (counts agree across
replicas and restarts) that reads only the two events carrying an execution's status. Step
durations are observed as the server handles events (``Server.observer``): the events it already
reads and writes, not a second copy of the stream, which used to cost the server as many
messages again as its real work. Task durations come from the workers' heartbeats (``ops``).
"""

from __future__ import annotations

import contextlib
import logging
from collections import OrderedDict
from datetime import datetime
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import ConsumerConfig, DeliverPolicy

from noetl.events import subjects as s
from noetl.events.envelope import loads
from noetl.server.api.metrics import Metrics
from noetl.server.api.queries import FINISHED_FILTER, REQUESTED_FILTER

log = logging.getLogger("noetl.server.api")

_STEP_END = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}
_MAX_OPEN_STEPS = 100_000


def _ts(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


class MetricsCollector:
    def __init__(self, nc: NATS, metrics: Metrics) -> None:
        self.nc, self.metrics = nc, metrics
        self._sub: Any = None
        self._open_steps: OrderedDict[str, float] = OrderedDict()

    async def start(self) -> None:
        filters = [REQUESTED_FILTER, FINISHED_FILTER]
        cfg = ConsumerConfig(filter_subjects=filters, deliver_policy=DeliverPolicy.ALL)
        self._sub = await self.nc.jetstream().subscribe(
            s.EVENTS_FILTER, stream=s.EVENTS_STREAM, cb=self._on_execution, ordered_consumer=True, config=cfg
        )

    async def stop(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    async def _on_execution(self, msg: Any) -> None:
        try:
            ev = loads(msg.data)
            eid, name = ev["execution_id"], ev["name"]
        except (ValueError, KeyError, TypeError):
            return
        if name == "playbook.execution.requested":
            self.metrics.execution_requested(eid)
        elif name == "workflow.finished":
            self.metrics.execution_finished(eid, str((ev.get("payload") or {}).get("status", "unknown")))

    def observe(self, ev: dict[str, Any]) -> None:
        """An event the server handled or decided: ``step.scheduled`` opens a run, a terminal closes it."""
        name = ev.get("name")
        if name != "step.scheduled" and name not in _STEP_END:
            return
        run, at = ev.get("step_run_id"), _ts(ev.get("timestamp"))
        if not run or at is None:
            return
        if name == "step.scheduled":
            self._open_steps[run] = at
            while len(self._open_steps) > _MAX_OPEN_STEPS:  # runs whose end we will never see
                self._open_steps.popitem(last=False)
        elif name in _STEP_END:
            started = self._open_steps.pop(run, None)
            if started is not None:
                self.metrics.observe_step(_STEP_END[name], at - started)
