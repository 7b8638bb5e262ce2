"""One command on a worker: a step run, one loop iteration, or a whole ``exec: local`` loop.

A ``CommandRun`` owns what the pipeline calls back into (its events, its iteration snapshot) and
the terminal event, so the worker's loop only takes commands and hands them over. A ``LocalLoop``
runs the iterations of an ``exec: local`` loop as ``CommandRun``s of their own (the ids they would
have had as separate commands derive from the loop command's), so the engine reads the same events
either way, and a redelivered loop command skips the iterations whose terminal event is stored.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from noetl.dsl.cache import template_engine
from noetl.dsl.errors import ReducerTypeError
from noetl.dsl.model import Playbook, Step
from noetl.dsl.policy import apply_patch
from noetl.dsl.reducers import apply_reduced
from noetl.dsl.specmerge import effective_step_spec
from noetl.events import subjects as s
from noetl.events.clock import utc_now
from noetl.events.envelope import Command, EntityType, EventName, Status, dumps, loads, make_event
from noetl.events.histogram import Histogram
from noetl.events.ids import derive_id
from noetl.events.masking import Masker
from noetl.events.objects import is_reference, resolve
from noetl.events.retry import retrying
from noetl.worker.output import INLINE_OUTPUT_BYTES, TaskOutput
from noetl.worker.pipeline import Pipeline, Snapshot
from noetl.worker.results import externalize

if TYPE_CHECKING:
    from noetl.worker.service import Worker


class _Command:
    """What every kind of command runs with: its worker, playbook, step and resolved keychain."""

    def __init__(
        self,
        worker: Worker,
        cmd: Command,
        playbook: Playbook,
        step: Step,
        keychain: dict[str, Any],
        masker: Masker,
    ) -> None:
        self.worker, self.cmd, self.playbook, self.step = worker, cmd, playbook, step
        self.keychain, self.masker = keychain, masker


class CommandRun(_Command):
    """A step run or one loop iteration: its pipeline, its events, its terminal event."""

    def __init__(
        self,
        worker: Worker,
        cmd: Command,
        playbook: Playbook,
        step: Step,
        keychain: dict[str, Any],
        masker: Masker,
        outbox: Any = None,
    ) -> None:
        """``outbox``: shared by the iterations of an ``exec: local`` loop, which confirms it in
        batches; a command of its own confirms its events with its terminal event."""
        super().__init__(worker, cmd, playbook, step, keychain, masker)
        self.shared = outbox is not None
        self.exec_id, self.run_id, self.index = cmd["execution_id"], cmd["step_run_id"], cmd.get("index")
        self.cid = cmd["command_id"]
        self.partition = int(cmd.get("partition") or 0)
        limits = (effective_step_spec(playbook, step).get("policy") or {}).get("limits") or {}
        self.limit = int(limits.get("max_payload_bytes", 65_536))
        self.outbox = outbox if outbox is not None else worker.bus.outbox(ack_all=worker._ack_all)
        self.key_base = f"{self.exec_id}/{self.run_id}/{self.index if self.index is not None else 's'}"
        # an iteration's task.started says which iteration (task.done shares its task_run_id): for
        # progress, `noetl events` and `noetl logs`; once per task run keeps the event bytes down
        self.at = {"index": self.index} if self.index is not None else {}
        self.ikey = s.iter_key(self.exec_id, self.run_id, self.index) if self.index is not None else None
        # the ctx writes of the run, as the server will fold them (masked): a local loop applies
        # them to the ctx its next iterations start with, as the server would before dispatching
        self.ctx_patches: list[dict[str, Any]] = []

    async def event(
        self,
        name: EventName,
        entity_type: EntityType,
        entity_id: str,
        status: Status,
        payload: dict[str, Any],
        eid: str,
        task_run_id: str | None = None,
    ) -> None:
        """Sent now (followers see a long task start), confirmed with the terminal event."""
        ev = make_event(
            event_id=eid,
            timestamp=utc_now(),
            source="worker",
            name=name,
            entity_type=entity_type,
            entity_id=entity_id,
            status=status,
            payload=self.masker.mask(payload),
            task_run_id=task_run_id,
            execution_id=self.exec_id,
            step_run_id=self.run_id,
            parent_execution_id=self.cmd.get("parent_execution_id"),
            trace_id=self.cmd.get("trace_id"),
        )
        await self.outbox.send(s.event_subject(self.partition, self.exec_id, name), dumps(ev), eid)

    async def emit(
        self, name: EventName, task: Any, n: int, data: dict[str, Any], output: TaskOutput | None = None
    ) -> None:
        """The pipeline's ``task.started`` and ``task.done``."""
        trid = derive_id(self.cid, task.name, n)
        if name == "task.started":
            await self.event(
                name,
                "task",
                task.name,
                "in_progress",
                {"task": task.name, **self.at, **data},
                derive_id(self.cid, "task.started", n),
                trid,
            )
            return
        status = str(data.get("status"))
        ms = (data.get("meta") or {}).get("duration_ms")
        if isinstance(ms, int | float):
            self.worker.task_durations.setdefault(status, Histogram()).observe(max(ms, 0) / 1000.0)
        outcome = dict(data)
        meta = outcome.get("meta")
        if isinstance(meta, dict) and meta.get("trace_id") == self.exec_id:
            # as in the envelope: a trace that is the execution id is not written (trace_of(event)
            # gives it back); the pipeline's rules saw it in outcome.meta all the same
            outcome["meta"] = {k: v for k, v in meta.items() if k != "trace_id"}
        bus = self.worker.bus
        if "result" in outcome:
            outcome["result"] = await externalize(
                bus, self.masker.mask(outcome["result"]), f"{self.key_base}/{task.name}/{n}", self.limit
            )
        payload: dict[str, Any] = {"task": task.name, "outcome": outcome}
        text = output.render(self.masker.mask_text) if output is not None else ""
        if text:  # masked and capped; by reference when large, as results are
            payload.update(self.at)  # whose output it is, without reading task.started too
            payload["output"] = await externalize(
                bus, text, f"{self.key_base}/{task.name}/{n}/output", INLINE_OUTPUT_BYTES
            )
        await self.event(
            name,
            "task",
            task.name,
            "success" if status == "ok" else "error",
            payload,
            derive_id(self.cid, "task.done", n),
            trid,
        )

    async def checkpoint(self, snap: Snapshot) -> None:
        if self.ikey is not None:  # not waited for: a lost one only means resuming from an earlier one
            await self.worker.iter_kv.put_nowait(self.ikey, dumps(self.masker.mask(snap.to_dict())))

    async def _snapshot(self) -> Snapshot | None:
        if self.ikey is None:
            return None
        ikey = self.ikey
        e = await retrying(lambda: self.worker.iter_kv.get(ikey), "reading an iteration snapshot")
        return Snapshot.from_dict(loads(e.value)) if e is not None and e.value else None

    async def run(self, redelivered: bool) -> bool:
        """Run the pipeline and publish the terminal event; True when it succeeded. Only a
        redelivered command can have a snapshot: a first delivery skips the read."""
        snapshot = await self._snapshot() if redelivered else None
        if self.index is None:
            await self.event(
                "step.started",
                "step",
                self.step.name,
                "in_progress",
                {"args": self.cmd.get("args") or {}, "worker": self.worker.worker_id},
                derive_id(self.cid, "step.started"),
            )
        else:  # spec 003 §8: sent now, confirmed with the iteration's terminal event (no extra ack)
            await self.event(
                "loop.iteration.started",
                "loop",
                self.step.name,
                "in_progress",
                {"index": self.index},  # the worker is named by the iteration's terminal event
                derive_id(self.cid, "loop.iteration.started"),
            )
        pipe = Pipeline(
            self.playbook,
            self.step,
            template_engine(self.playbook),
            execution_id=self.exec_id,
            workload=self.cmd.get("workload") or {},
            ctx=self.cmd.get("ctx") or {},
            args=self.cmd.get("args") or {},
            keychain=self.keychain,
            services=self.worker.services,
            emit=self.emit,
            checkpoint=self.checkpoint,
            command_id=self.cid,
            trace_id=self.cmd.get("trace_id"),
        )
        res = await self.worker._run_pipeline(self.exec_id, pipe, snapshot, self.cmd.get("iter"), self.run_id)
        result = await externalize(
            self.worker.bus, self.masker.mask(res.result), f"{self.key_base}/result", self.limit
        )
        payload: dict[str, Any] = {"result": result}
        if res.ctx_patches:  # the fold reads a missing list as empty: no bytes for nothing
            payload["ctx_patches"] = self.ctx_patches = self.masker.mask(res.ctx_patches)
        if not res.ok:
            payload["error"] = self.masker.mask(res.error)
        await self.worker._publish_terminal(self.cmd, res.ok, payload, self.outbox, confirm=not self.shared)
        return res.ok


LOCAL_CONFIRM_EVERY = 1024  # plain messages between a local loop's confirmations


class SharedOutbox:
    """An outbox the concurrent iterations of one local loop share: a send and a confirmation
    never interleave, so a confirmation never forgets a message sent while it waited."""

    def __init__(self, outbox: Any) -> None:
        self._outbox = outbox
        self._lock = asyncio.Lock()

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        async with self._lock:
            await self._outbox.send(subject, data, msg_id, ack=ack)

    async def confirm(self) -> None:
        async with self._lock:
            await self._outbox.confirm()


class LocalLoop(_Command):
    """An ``exec: local`` loop (SEMANTICS §21): its iterations run here, in order or up to
    ``max_in_flight`` at once, each as the command it would have been.

    Placement never changes an outcome: the server dispatches a distributed iteration with the
    ctx it holds then, which has folded the ``ctx_patches`` of every iteration that ended before
    it. A local loop keeps the same running ctx here (patches applied in the order the terminal
    events are sent, through the loop's reducers when it declares any), so a sequential loop's
    iteration sees the ``set_ctx`` of the ones before it exactly as a distributed one does."""

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
        return await retrying(lambda: resolve(self.worker.bus, ref), "reading loop items")

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
        filters = [
            s.execution_event_filter(exec_id, n) for n in ("loop.iteration.done", "loop.iteration.failed")
        ]
        msgs = await retrying(
            lambda: self.worker.bus.read(s.EVENTS_STREAM, filters), "reading ended iterations"
        )
        ended: set[int] = set()
        for m in msgs:
            e = loads(m.data)
            index = (e.get("payload") or {}).get("index") if isinstance(e, dict) else None
            if isinstance(index, int) and e.get("step_run_id") == run_id and index not in ended:
                ended.add(index)
                self._fold(index, list((e.get("payload") or {}).get("ctx_patches") or []))
        return ended

    def _stop_starting(self, failed: bool) -> bool:
        """No new iteration after a fail_fast failure, a cancel, or the server stopping the run."""
        w = self.worker
        return (
            (failed and bool(self.local.get("fail_fast")))
            or self.cmd["execution_id"] in w._cancelled
            or self.cmd["step_run_id"] in w._stopped_runs
        )

    async def run(self, redelivered: bool) -> None:
        items = await self._items()
        ended = await self._ended() if redelivered else set()
        slots = asyncio.Semaphore(max(1, int(self.local.get("max_in_flight") or 1)))
        # one outbox for every iteration, confirmed every LOCAL_CONFIRM_EVERY plain messages and
        # at the end (the command's ack waits for that): an iteration whose events a crash lost
        # runs again at the redelivery. The interval only bounds what the outbox keeps for a
        # resend (~0.5 MB): while one confirmation waits for its ack, every iteration of the loop
        # waits, so every 64 messages (16 iterations) cost the loop a round trip.
        own = self.worker.bus.outbox(ack_all=self.worker._ack_all, confirm_every=LOCAL_CONFIRM_EVERY)
        outbox = SharedOutbox(own)
        running: set[asyncio.Task[None]] = set()
        failed = False
        errors: list[Exception] = []

        async def one(i: int) -> None:
            nonlocal failed
            ok = False
            try:
                run = CommandRun(
                    self.worker, self._iteration(i, items[i]), self.playbook, self.step,
                    self.keychain, self.masker, outbox,
                )
                ok = await run.run(redelivered)
                ok = self._fold(i, run.ctx_patches) and ok
            except Exception as e:  # a fault, not an outcome: no new start, then redelivery
                errors.append(e)
            finally:
                failed = failed or not ok  # before the slot is free: the next start sees it
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
        first = self._iteration(0, items[0])
        await self.worker._publish_terminal(first, False, {"result": None, "error": error})
        if len(items) > 1:
            await self._report_skipped(list(range(1, len(items))))

    async def _report_skipped(self, skipped: list[int]) -> None:
        cmd = self.cmd
        exec_id = cmd["execution_id"]
        ev = make_event(
            event_id=derive_id(cmd["command_id"], "loop.local.stopped"),
            execution_id=exec_id,
            timestamp=utc_now(),
            source="worker",
            name="loop.local.stopped",
            entity_type="loop",
            entity_id=cmd["step"],
            status="in_progress",
            payload={"skipped": skipped, "worker": self.worker.worker_id},
            step_run_id=cmd["step_run_id"],
            parent_execution_id=cmd.get("parent_execution_id"),
            trace_id=cmd.get("trace_id"),
        )
        subject = s.event_subject(int(cmd.get("partition") or 0), exec_id, "loop.local.stopped")
        outbox = self.worker.bus.outbox(ack_all=self.worker._ack_all)
        await outbox.send(subject, dumps(ev), ev["event_id"], ack=True)
        await retrying(outbox.confirm, f"storing the end of local loop {cmd['command_id']}")
