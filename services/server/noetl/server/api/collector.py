"""Feeds ``Metrics`` from the event log with two ordered consumers.

Executions are folded from the start of the stream (counts agree across replicas and restarts)
and read only the two events that carry an execution's status. Durations are read from now on:
replaying every ``task.done`` ever stored at each start would cost more than the numbers are
worth, and histograms restart with the process anyway.
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

_STEP_START = ("step.started", "loop.started")
_STEP_END = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}
DURATION_FILTERS = [f"noetl.events.*.*.{n}" for n in (*_STEP_START, *_STEP_END, "task.done")]
_MAX_OPEN_STEPS = 100_000


def _ts(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


class MetricsCollector:
    def __init__(self, nc: NATS, metrics: Metrics) -> None:
        self.nc, self.metrics = nc, metrics
        self._subs: list[Any] = []
        self._open_steps: OrderedDict[str, float] = OrderedDict()

    async def start(self) -> None:
        js = self.nc.jetstream()
        for filters, policy, cb in (
            ([REQUESTED_FILTER, FINISHED_FILTER], DeliverPolicy.ALL, self._on_execution),
            (DURATION_FILTERS, DeliverPolicy.NEW, self._on_duration),
        ):
            cfg = ConsumerConfig(filter_subjects=filters, deliver_policy=policy)
            self._subs.append(
                await js.subscribe(
                    s.EVENTS_FILTER, stream=s.EVENTS_STREAM, cb=cb, ordered_consumer=True, config=cfg
                )
            )

    async def stop(self) -> None:
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

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

    async def _on_duration(self, msg: Any) -> None:
        try:
            ev = loads(msg.data)
            name = ev["name"]
        except (ValueError, KeyError, TypeError):
            return
        if name == "task.done":
            outcome = (ev.get("payload") or {}).get("outcome") or {}
            ms = (outcome.get("meta") or {}).get("duration_ms")
            if isinstance(ms, int | float):
                self.metrics.observe_task(str(outcome.get("status", "unknown")), ms / 1000.0)
            return
        run, at = ev.get("step_run_id"), _ts(ev.get("timestamp"))
        if not run or at is None:
            return
        if name in _STEP_START:
            self._open_steps[run] = at
            while len(self._open_steps) > _MAX_OPEN_STEPS:  # runs whose end we will never see
                self._open_steps.popitem(last=False)
        elif name in _STEP_END:
            started = self._open_steps.pop(run, None)
            if started is not None:
                self.metrics.observe_step(_STEP_END[name], at - started)
