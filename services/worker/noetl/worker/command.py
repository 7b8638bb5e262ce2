"""One command on a worker: a step run or one loop iteration (a whole ``exec: local`` loop is
``noetl.worker.local_loop``).

A ``CommandRun`` owns what the pipeline calls back into (its events, its iteration snapshot) and
its terminal event (``CommandEvents``), so the worker's loop only takes commands and hands them
over. It reaches the worker only through the ``RunContext`` it is given. Loop iterations write a
snapshot to ``noetl_iter`` after every task, without waiting: one lost to a crash only means the
iteration resumes from an earlier one, which at-least-once task runs allow anyway; a redelivered
iteration resumes from it. The server purges a loop's snapshots when the loop ends.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.cache import template_engine
from noetl.dsl.model import Playbook, Step
from noetl.dsl.specmerge import effective_step_spec
from noetl.events import subjects as s
from noetl.events.envelope import Command, EventName, dumps, loads
from noetl.events.ids import derive_id
from noetl.events.masking import Masker
from noetl.events.port import EventOutbox
from noetl.events.retry import retrying
from noetl.worker.command_events import CommandEvents
from noetl.worker.lifecycle import RunContext
from noetl.worker.output import INLINE_OUTPUT_BYTES, TaskOutput
from noetl.worker.pipeline import Pipeline, Snapshot
from noetl.worker.results import externalize


class CommandRun(CommandEvents):
    """A step run or one loop iteration: its pipeline, its events, its terminal event."""

    def __init__(
        self,
        ctx: RunContext,
        cmd: Command,
        playbook: Playbook,
        step: Step,
        keychain: dict[str, Any],
        masker: Masker,
        outbox: EventOutbox | None = None,
    ) -> None:
        """``outbox``: see ``CommandEvents``."""
        super().__init__(ctx, cmd, masker, outbox)
        self.playbook, self.step, self.keychain = playbook, step, keychain
        self.exec_id, self.run_id = cmd["execution_id"], cmd["step_run_id"]
        limits = (effective_step_spec(playbook, step).get("policy") or {}).get("limits") or {}
        self.limit = int(limits.get("max_payload_bytes", 65_536))
        self.key_base = f"{self.exec_id}/{self.run_id}/{self.index if self.index is not None else 's'}"
        # an iteration's task.started says which iteration (task.done shares its task_run_id): for
        # progress, `noetl events` and `noetl logs`; once per task run keeps the event bytes down
        self.at = {"index": self.index} if self.index is not None else {}
        self.ikey = s.iter_key(self.exec_id, self.run_id, self.index) if self.index is not None else None
        # the ctx writes of the run, as the server will fold them (masked): a local loop applies
        # them to the ctx its next iterations start with, as the server would before dispatching
        self.ctx_patches: list[dict[str, Any]] = []

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
            self.ctx.observe_task(status, max(ms, 0) / 1000.0)
        outcome = dict(data)
        meta = outcome.get("meta")
        if isinstance(meta, dict) and meta.get("trace_id") == self.exec_id:
            # as in the envelope: a trace that is the execution id is not written (trace_of(event)
            # gives it back); the pipeline's rules saw it in outcome.meta all the same
            outcome["meta"] = {k: v for k, v in meta.items() if k != "trace_id"}
        bus = self.ctx.bus
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
            await self.ctx.iter_kv.put_nowait(self.ikey, dumps(self.masker.mask(snap.to_dict())))

    async def _snapshot(self) -> Snapshot | None:
        if self.ikey is None:
            return None
        ikey = self.ikey
        e = await retrying(lambda: self.ctx.iter_kv.get(ikey), "reading an iteration snapshot")
        return Snapshot.from_dict(loads(e.value)) if e is not None and e.value else None

    async def _started(self) -> None:
        if self.index is None:
            await self.event(
                "step.started",
                "step",
                self.step.name,
                "in_progress",
                {"args": self.cmd.get("args") or {}, "worker": self.ctx.worker_id},
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

    async def run(self, redelivered: bool) -> bool:
        """Run the pipeline and publish the terminal event; True when it succeeded. Only a
        redelivered command can have a snapshot: a first delivery skips the read."""
        snapshot = await self._snapshot() if redelivered else None
        await self._started()
        pipe = Pipeline(
            self.playbook,
            self.step,
            template_engine(self.playbook),
            execution_id=self.exec_id,
            workload=self.cmd.get("workload") or {},
            ctx=self.cmd.get("ctx") or {},
            args=self.cmd.get("args") or {},
            keychain=self.keychain,
            services=self.ctx.services,
            emit=self.emit,
            checkpoint=self.checkpoint,
            command_id=self.cid,
            trace_id=self.cmd.get("trace_id"),
        )
        iter_ = self.cmd.get("iter")
        res = await self.ctx.interruptible(self.exec_id, self.run_id, lambda: pipe.run(snapshot, iter_))
        result = await externalize(
            self.ctx.bus, self.masker.mask(res.result), f"{self.key_base}/result", self.limit
        )
        payload: dict[str, Any] = {"result": result}
        if res.ctx_patches:  # the fold reads a missing list as empty: no bytes for nothing
            payload["ctx_patches"] = self.ctx_patches = self.masker.mask(res.ctx_patches)
        if not res.ok:
            payload["error"] = self.masker.mask(res.error)
        await self.terminal(res.ok, payload, confirm=not self.shared)
        return res.ok
