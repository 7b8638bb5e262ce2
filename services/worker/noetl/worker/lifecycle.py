"""What a command's run may use of the worker that runs it, and nothing more.

The worker owns the command message (its slot, its lease, its ack or nak) and the bookkeeping of
redeliveries; the run (``noetl.worker.command``) owns its pipeline and its events, terminal one
included. Between them stands this small object, handed to every run: the bus to publish and store
through, where the iteration snapshots live, the services tools use, the worker's name for its
events, where task durations are counted, and the cancellations that may interrupt the run. A run
never reaches into the worker, so either side can change inside without the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from noetl.events.envelope import Command
from noetl.events.histogram import Histogram
from noetl.events.port import Bus, EventOutbox, KeyValue
from noetl.events.writer import EventWriter
from noetl.worker.interrupts import Interrupts
from noetl.worker.pipeline import RunResult


@dataclass(frozen=True)
class RunContext:
    bus: Bus
    worker_id: str
    services: dict[str, Any]  # what tools reach (the bus, the catalog, the raw connection)
    iter_kv: KeyValue  # iteration snapshots (``noetl_iter``)
    interrupts: Interrupts
    task_durations: dict[str, Histogram]  # by outcome status, reported with the heartbeat
    ack_all: bool  # every event acked: the streams are replicated (see ``Outbox``)

    def outbox(self, *, confirm_every: int | None = 64) -> EventOutbox:
        return self.bus.outbox(ack_all=self.ack_all, confirm_every=confirm_every)

    def writer(self, cmd: Command, outbox: EventOutbox | None = None) -> EventWriter:
        """The command's events, with its correlation fields, to ``outbox`` (a new one if None)."""
        return EventWriter(
            outbox if outbox is not None else self.outbox(),
            source="worker",
            execution_id=cmd["execution_id"],
            partition=int(cmd.get("partition") or 0),
            step_run_id=cmd["step_run_id"],
            parent_execution_id=cmd.get("parent_execution_id"),
            trace_id=cmd.get("trace_id"),
        )

    def observe_task(self, status: str, seconds: float) -> None:
        self.task_durations.setdefault(status, Histogram()).observe(seconds)

    async def interruptible(
        self, execution_id: str, run_id: str, work: Callable[[], Awaitable[RunResult]]
    ) -> RunResult:
        """``work`` where a cancellation of the execution or of the step run can stop it."""
        return await self.interrupts.run(execution_id, run_id, work)

    def stops(self, execution_id: str, run_id: str) -> bool:
        return self.interrupts.stops(execution_id, run_id)
