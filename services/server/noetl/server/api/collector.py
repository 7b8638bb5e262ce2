"""Feeds ``Metrics``: executions from the event log, step durations from the server's own work.

Executions are folded from the start of the stream by one ordered reader (counts agree across
replicas and restarts) that reads only the two events carrying an execution's status. It is the
port's ``reader``, not ``follow``: it lives as long as the server, and a reader says when it lost
its place (``ReaderLostError``, e.g. its consumer gone with a restarted nats-server), so it is
opened again after the last event folded: none is counted twice or missed.

Step durations are observed as the server handles events (``Server.observer``): the events it
already reads and writes, not a second copy of the stream, which used to cost the server as many
messages again as its real work. Task durations come from the workers' heartbeats (``ops``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from datetime import datetime
from typing import Any

from noetl.events import subjects as s
from noetl.events.envelope import Event, loads
from noetl.events.nats_port import as_bus
from noetl.events.port import Message, ReaderLostError
from noetl.events.runtime import cancel_and_wait
from noetl.server.api.metrics import Metrics
from noetl.server.api.queries import FINISHED_FILTER, REQUESTED_FILTER

log = logging.getLogger("noetl.server.api")

_STEP_END = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}
_MAX_OPEN_STEPS = 100_000
_REOPEN_AFTER = 1.0  # seconds before a failed reader is opened again


def _ts(text: Any) -> float | None:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


class MetricsCollector:
    def __init__(self, conn: Any, metrics: Metrics) -> None:
        """``conn``: the bus port, or a nats-py connection or JetStream context (``as_bus``)."""
        self.bus, self.metrics = as_bus(conn), metrics
        self._task: asyncio.Task[None] | None = None
        self._next_seq = 1  # the stream position after the last execution event folded
        self._open_steps: OrderedDict[str, float] = OrderedDict()

    async def start(self) -> None:
        """Raises while the events stream does not exist yet (the caller retries); then folds in
        the background."""
        await self.bus.count(s.EVENTS_STREAM)
        self._task = asyncio.create_task(self._fold(), name="noetl-metrics-collector")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _fold(self) -> None:
        filters = [REQUESTED_FILTER, FINISHED_FILTER]
        while True:
            reader = None
            try:
                reader = await self.bus.reader(s.EVENTS_STREAM, filters, start_seq=self._next_seq)
                while True:
                    for msg in await reader.fetch(256, 5.0):
                        self._next_seq = msg.seq + 1
                        self._on_execution(msg)
            except ReaderLostError as e:
                log.info("execution metrics: %s; reading on from %d", e, self._next_seq)
            except Exception as e:
                log.warning("execution metrics: reading the events failed, reading on: %s", e)
            finally:
                if reader is not None:
                    with contextlib.suppress(Exception):
                        await reader.close()
            await asyncio.sleep(_REOPEN_AFTER)

    def _on_execution(self, msg: Message) -> None:
        try:
            ev = loads(msg.data)
            eid, name = ev["execution_id"], ev["name"]
        except (ValueError, KeyError, TypeError):
            return
        if name == "playbook.execution.requested":
            self.metrics.execution_requested(eid)
        elif name == "workflow.finished":
            self.metrics.execution_finished(eid, str((ev.get("payload") or {}).get("status", "unknown")))

    def observe(self, ev: Event) -> None:
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
