"""Cancellations reaching the commands they stop.

An execution cancelled, or a step run the server stopped (its time limit passed, SEMANTICS §16),
interrupts this worker's command tasks inside their pipeline run; their later commands (loop
iterations already queued) end at once. The ids are kept, bounded, because those later commands
can arrive long after the event that stopped them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from noetl.dsl.errors import AbortedError, ExecutionCancelledError
from noetl.events.envelope import loads
from noetl.events.port import Message
from noetl.worker.pipeline import RunResult

_KEEP = 10_000  # cancelled executions and stopped step runs remembered, oldest forgotten first


class Interrupts:
    def __init__(self) -> None:
        self._cancelled: dict[str, None] = {}  # execution ids, oldest first
        # step runs the server stopped, oldest first
        self._stopped_runs: dict[str, None] = {}
        # command tasks inside their pipeline run, by execution and by step run
        self._by_execution: dict[str, set[asyncio.Task[Any]]] = {}
        self._by_run: dict[str, set[asyncio.Task[Any]]] = {}
        self._interrupted: set[asyncio.Task[Any]] = set()

    async def on_cancel(self, msg: Message) -> None:
        """Stop this execution's running commands; its later commands end at once as cancelled."""
        try:
            execution_id = loads(msg.data)["execution_id"]
        except (ValueError, KeyError, TypeError):
            return
        _remember(self._cancelled, execution_id)
        self._interrupt(self._by_execution.get(execution_id, ()))

    async def on_step_cancelled(self, msg: Message) -> None:
        """The server ended a step run (its time limit passed): stop its commands still running;
        its later commands (loop iterations already queued) end at once."""
        try:
            run_id = loads(msg.data)["step_run_id"]
        except (ValueError, KeyError, TypeError):
            return
        _remember(self._stopped_runs, run_id)
        self._interrupt(self._by_run.get(run_id, ()))

    def _interrupt(self, tasks: set[asyncio.Task[Any]] | tuple[()]) -> None:
        for task in list(tasks):
            if task not in self._interrupted:
                self._interrupted.add(task)
                task.cancel()

    def stops(self, execution_id: str, run_id: str) -> bool:
        """No new work for this execution or step run: it was cancelled or stopped."""
        return execution_id in self._cancelled or run_id in self._stopped_runs

    async def run(
        self, execution_id: str, run_id: str, work: Callable[[], Awaitable[RunResult]]
    ) -> RunResult:
        """Run in this command's own task; a cancellation of the execution, or the server stopping
        the step run, interrupts it here and becomes its outcome."""
        if execution_id in self._cancelled:
            return _cancelled()
        if run_id in self._stopped_runs:
            return _stopped()
        task = asyncio.current_task()
        assert task is not None
        running = self._by_execution.setdefault(execution_id, set())
        running.add(task)
        of_run = self._by_run.setdefault(run_id, set())
        of_run.add(task)
        try:
            return await work()
        except asyncio.CancelledError:
            # ours (the execution was cancelled) and nobody else's, e.g. not a shutdown's
            if task in self._interrupted and task.cancelling() == 1:
                task.uncancel()
                return _cancelled() if execution_id in self._cancelled else _stopped()
            raise
        finally:
            self._interrupted.discard(task)
            running.discard(task)
            of_run.discard(task)
            if not running:
                self._by_execution.pop(execution_id, None)
            if not of_run:
                self._by_run.pop(run_id, None)


def _remember(ids: dict[str, None], new: str) -> None:
    ids[new] = None
    while len(ids) > _KEEP:
        del ids[next(iter(ids))]


def _stopped() -> RunResult:
    return RunResult(
        ok=False,
        error=AbortedError(
            "the server stopped this step run (its time limit passed); it was interrupted"
        ).to_dict(),
    )


def _cancelled() -> RunResult:
    return RunResult(ok=False, error=ExecutionCancelledError("the execution was cancelled").to_dict())
