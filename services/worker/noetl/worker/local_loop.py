"""A whole ``exec: local`` loop on one worker (SEMANTICS §21).

Its iterations run here as ``CommandRun``s of their own (the ids they would have had as separate
commands derive from the loop command's), so the engine reads the same events either way, and a
redelivered loop command skips the iterations whose terminal event is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Any

from noetl.dsl.errors import ReducerTypeError
from noetl.dsl.model import Playbook, Step
from noetl.dsl.policy import apply_patch
from noetl.dsl.reducers import apply_reduced
from noetl.events import subjects as s
from noetl.events.batches import BATCHED, BatchingOutbox, events_in
from noetl.events.envelope import Command
from noetl.events.ids import derive_id
from noetl.events.masking import Masker
from noetl.events.objects import is_reference, resolve
from noetl.events.retry import retrying
from noetl.worker.command import CommandRun
from noetl.worker.command_events import CommandEvents
from noetl.worker.lifecycle import RunContext

# batches between a local loop's confirmations: what the outbox keeps for a resend (~4 MiB)
LOCAL_CONFIRM_EVERY = 16


# how long an ended iteration waits for others to end and share its batch
SETTLE_WAIT_S = 0.002


class _Settling:
    """When the iterations' events go out: an iteration that ended waits for its batch, and the
    batch goes as soon as every running iteration has ended (group commit: a sequential loop
    sends one message per iteration, 64 noop iterations at once one for all), or after
    ``SETTLE_WAIT_S`` when some still run: iterations that do I/O end apart, and holding their
    slots longer would slow the loop more than their messages cost."""

    def __init__(self, outbox: BatchingOutbox) -> None:
        self.outbox = outbox
        self.running = 0  # started and not yet out
        self.waiting = 0  # ended, waiting for their batch

    async def ended(self) -> None:
        self.waiting += 1
        try:
            if self.waiting < self.running:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.outbox.flushed(), SETTLE_WAIT_S)
                    return
            await self.outbox.flush()  # once it returns, what was collected before it is out
        finally:
            self.waiting -= 1

    def left(self) -> None:
        self.running -= 1


class LocalLoop:
    """An ``exec: local`` loop: its iterations run here, in order or up to ``max_in_flight`` at
    once, each as the command it would have been.

    Placement never changes an outcome: the server dispatches a distributed iteration with the
    ctx it holds then, which has folded the ``ctx_patches`` of every iteration that ended before
    it. A local loop keeps the same running ctx here (patches applied in the order the terminal
    events are sent, through the loop's reducers when it declares any), so a sequential loop's
    iteration sees the ``set_ctx`` of the ones before it exactly as a distributed one does."""

    def __init__(
        self,
        ctx: RunContext,
        cmd: Command,
        playbook: Playbook,
        step: Step,
        keychain: dict[str, Any],
        masker: Masker,
    ) -> None:
        self.run_ctx, self.cmd, self.playbook, self.step = ctx, cmd, playbook, step
        self.keychain, self.masker = keychain, masker

    @functools.cached_property
    def ctx(self) -> dict[str, Any]:
        """The running ctx, from the loop command's; replaced as iterations' patches apply."""
        return dict(self.cmd.get("ctx") or {})

    @property
    def local(self) -> dict[str, Any]:
        return self.cmd["local"]

    async def _items(self) -> list[Any]:
        """The loop's items: in the command, or by reference when they were large."""
        items: Any = self.local["items"]
        if not is_reference(items):
            return items  # type: ignore[no-any-return]
        ref = items
        return await retrying(lambda: resolve(self.run_ctx.bus, ref), "reading loop items")

    def _iteration(self, i: int, item: Any) -> Command:
        iter_: dict[str, Any] = {self.local["iterator"]: item, "index": i}
        if self.local.get("parent") is not None:
            iter_["parent"] = self.local["parent"]
        cmd = self.cmd.copy()  # the keys in their order, without the loop
        del cmd["local"]
        cmd["command_id"] = derive_id(self.cmd["command_id"], "iteration", i)
        cmd["index"], cmd["iter"] = i, iter_
        cmd["ctx"] = self.ctx
        return cmd

    def _fold(self, i: int, patches: list[dict[str, Any]]) -> bool:
        """An iteration's ctx writes, applied as the server's fold applies them (engine
        ``loops.on_iteration``): False when a reducer refuses a value, which fails the iteration
        there (all of its writes or none)."""
        if not patches:
            return True
        reducers = self.step.loop.reducers if self.step.loop is not None else None
        if reducers:
            try:
                where = f"loop step {self.step.name!r}, iteration {i}"
                self.ctx = apply_reduced(self.ctx, patches, reducers, where)
            except ReducerTypeError:
                return False
            return True
        for patch in patches:
            self.ctx = apply_patch(self.ctx, patch)
        return True

    async def _ended(self) -> set[int]:
        """Iterations whose terminal event is stored: a redelivered loop does not run them again,
        and starts the others with the ctx their writes left."""
        exec_id, run_id = self.cmd["execution_id"], self.cmd["step_run_id"]
        terminal = ("loop.iteration.done", "loop.iteration.failed")
        filters = [s.execution_event_filter(exec_id, n) for n in (*terminal, BATCHED)]
        msgs = await retrying(
            lambda: self.run_ctx.bus.read(s.EVENTS_STREAM, filters), "reading ended iterations"
        )
        ended: set[int] = set()
        for e in (e for m in msgs for e in events_in(m.data)):
            if e.get("name") not in terminal:
                continue
            index = (e.get("payload") or {}).get("index")
            if isinstance(index, int) and e.get("step_run_id") == run_id and index not in ended:
                ended.add(index)
                self._fold(index, list((e.get("payload") or {}).get("ctx_patches") or []))
        return ended

    def _stop_starting(self, failed: bool) -> bool:
        """No new iteration after a fail_fast failure, a cancel, or the server stopping the run."""
        return (failed and bool(self.local.get("fail_fast"))) or self.run_ctx.stops(
            self.cmd["execution_id"], self.cmd["step_run_id"]
        )

    async def run(self, redelivered: bool) -> None:
        items = await self._items()
        ended = await self._ended() if redelivered else set()
        slots = asyncio.Semaphore(max(1, int(self.local.get("max_in_flight") or 1)))
        # one outbox for every iteration, its events stored in batches (noetl.events.batches) and
        # confirmed at the end (the command's ack waits for that): an iteration whose events a
        # crash lost runs again at the redelivery. An iteration keeps its slot until its events
        # are out, so no more iterations than run at once can be lost that way.
        outbox = BatchingOutbox(self.run_ctx.outbox(confirm_every=LOCAL_CONFIRM_EVERY), self.cmd["step"])
        settling = _Settling(outbox)
        running: set[asyncio.Task[None]] = set()
        failed = False
        errors: list[Exception] = []

        async def one(i: int) -> None:
            nonlocal failed
            ok = False
            try:
                run = CommandRun(
                    self.run_ctx, self._iteration(i, items[i]), self.playbook, self.step,
                    self.keychain, self.masker, outbox,
                )
                ok = await run.run(redelivered)
                ok = self._fold(i, run.ctx_patches) and ok
                await settling.ended()
            except Exception as e:  # a fault, not an outcome: no new start, then redelivery
                errors.append(e)
            finally:
                failed = failed or not ok  # before the slot is free: the next start sees it
                settling.left()
                slots.release()

        skipped: list[int] = []
        for i in range(len(items)):
            if i in ended:
                continue
            await slots.acquire()
            if errors or self._stop_starting(failed):
                slots.release()
                skipped = [j for j in range(i, len(items)) if j not in ended]
                break
            settling.running += 1
            task = asyncio.create_task(one(i))
            running.add(task)
            task.add_done_callback(running.discard)
        await asyncio.gather(*running)
        if errors:  # the command is redelivered and resumes after the iterations that ended
            raise errors[0]
        await retrying(outbox.confirm, f"storing the iterations of local loop {self.cmd['command_id']}")
        if skipped:
            await self._report_skipped(skipped)

    async def fail(self, error: dict[str, Any]) -> None:
        """The loop cannot run here at all (its credentials, a command delivered too often): the
        first iteration fails with the reason and the others are reported as never started."""
        items = await self._items()
        if not items:
            return
        await CommandEvents(self.run_ctx, self._iteration(0, items[0])).fail(error)
        if len(items) > 1:
            await self._report_skipped(list(range(1, len(items))))

    async def _report_skipped(self, skipped: list[int]) -> None:
        cmd = self.cmd
        writer = self.run_ctx.writer(cmd)
        ev = writer.build(
            event_id=derive_id(cmd["command_id"], "loop.local.stopped"),
            name="loop.local.stopped",
            entity_type="loop",
            entity_id=cmd["step"],
            status="in_progress",
            payload={"skipped": skipped, "worker": self.run_ctx.worker_id},
        )
        await writer.send(ev, ack=True)
        await retrying(writer.confirm, f"storing the end of local loop {cmd['command_id']}")
