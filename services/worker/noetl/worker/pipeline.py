"""The ordered task pipeline of one step run or loop iteration, with the task policy (§6).

The worker, not the server, applies task policy: ``retry`` sleeps and runs again, ``jump`` moves
the program counter, ``break`` and ``fail`` end the run. Within a run, patches are visible at
once (a ``jump`` rule sees the ``set_iter`` it wrote); they leave the run as the ``ctx_patches``
of its terminal event, which the server applies in order.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar

from noetl.dsl.errors import (
    NoetlError,
    PolicyFailError,
    RetriesExhaustedError,
    TaskRunLimitError,
    TemplateError,
    ToolError,
)
from noetl.dsl.model import Playbook, Step, Task
from noetl.dsl.policy import Directive, apply_patch, evaluate_task_policy
from noetl.dsl.specmerge import deep_merge, effective_step_spec, effective_task_spec, scoped
from noetl.dsl.templates import TemplateEngine
from noetl.events import tracing
from noetl.events.vocabulary import EventName
from noetl.host import logs
from noetl.worker.output import TaskOutput, capturing
from noetl.worker.tools.base import Clock, ToolContext, get_tool
from noetl.worker.tools.workbook import resolve_workbook

T = TypeVar("T")
# a template call slower than this moves the rest of its run's template work off the event loop
SLOW_RENDER_S = 0.02
_SLOW_EXECUTIONS: set[str] = set()  # of this worker process: their template work runs in a thread


class _GcRuns:
    """How many garbage collections this process has started (``gc.callbacks``): a template call
    during which one ran is not judged slow, the collection's time is not the template's."""

    runs = 0

    @classmethod
    def on_gc(cls, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            cls.runs += 1


_GC = _GcRuns
gc.callbacks.append(_GcRuns.on_gc)

# fields a kind reads as code, not as a template
_RAW_FIELDS = frozenset({"code", "script"})  # python's code, a script task's text


@dataclass
class Snapshot:
    """Where a run stands after a task: enough to resume it after the worker dies."""

    pc: int = 0
    attempt: int = 1
    runs: int = 0
    prev: Any = None
    iter: dict[str, Any] | None = None
    ctx_patches: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pc": self.pc,
            "attempt": self.attempt,
            "runs": self.runs,
            "prev": self.prev,
            "iter": self.iter,
            "ctx_patches": self.ctx_patches,
            "labels": self.labels,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Snapshot:
        return cls(
            pc=d.get("pc", 0),
            attempt=d.get("attempt", 1),
            runs=d.get("runs", 0),
            prev=d.get("prev"),
            iter=d.get("iter"),
            ctx_patches=list(d.get("ctx_patches") or []),
            labels=dict(d.get("labels") or {}),
        )


@dataclass
class RunResult:
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    ctx_patches: list[dict[str, Any]] = field(default_factory=list)
    iter: dict[str, Any] | None = None


class EmitFn(Protocol):
    """``task.started`` and ``task.done``; the latter with what the run printed and logged."""

    def __call__(
        self, name: EventName, task: Task, n: int, data: dict[str, Any], output: TaskOutput | None = None
    ) -> Awaitable[None]: ...


CheckpointFn = Callable[[Snapshot], Awaitable[None]]


class Pipeline:
    def __init__(
        self,
        playbook: Playbook,
        step: Step,
        engine: TemplateEngine,
        *,
        execution_id: str,
        workload: dict[str, Any],
        ctx: dict[str, Any],
        args: dict[str, Any],
        keychain: dict[str, Any],
        services: Any = None,
        emit: EmitFn | None = None,
        checkpoint: CheckpointFn | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        command_id: str = "",
        trace_id: str | None = None,
    ) -> None:
        """``trace_id``: the execution's trace, carried into every ``outcome.meta``."""
        self.playbook, self.step, self.engine = playbook, step, engine
        self.trace_id = trace_id
        self.execution_id, self.workload, self.base_ctx, self.args = execution_id, workload, ctx, args
        self.keychain, self.services = keychain, services
        self.emit, self.checkpoint, self.sleep = emit, checkpoint, sleep
        self.command_id = command_id

    def _context(self, snap: Snapshot, task: Task, ctx: dict[str, Any]) -> dict[str, Any]:
        c: dict[str, Any] = dict(snap.labels)
        c.update(
            workload=self.workload,
            keychain=self.keychain,
            ctx=ctx,
            args=self.args,
            execution_id=self.execution_id,
            _prev=snap.prev,
            _task=task.name,
            _attempt=snap.attempt,
        )
        if snap.iter is not None:
            c["iter"] = snap.iter
        return c

    async def run(self, snap: Snapshot | None = None, iter_: dict[str, Any] | None = None) -> RunResult:
        snap = snap or Snapshot(iter=iter_)
        tasks = self.step.tool
        max_runs = int(effective_step_spec(self.playbook, self.step).get("max_task_runs") or 10_000)
        ctx = self.base_ctx
        for p in snap.ctx_patches:
            ctx = apply_patch(ctx, p)
        while snap.pc < len(tasks):
            task = tasks[snap.pc]
            if snap.runs >= max_runs:
                err = TaskRunLimitError(
                    f"step {self.step.name} ran {snap.runs} tasks, the limit of "
                    f"spec.max_task_runs: add a break to the jump cycle or raise the limit"
                )
                return self._fail(snap, err.to_dict())
            snap.runs += 1
            logs.bind(task=task.name)
            context = self._context(snap, task, ctx)
            outcome, output = await self._run_task(task, context, snap.attempt, snap.runs)
            context["outcome"] = outcome
            if self.emit:
                await self.emit("task.done", task, snap.runs, outcome, output)
            try:
                d = await self._cpu(
                    partial(
                        evaluate_task_policy,
                        task.policy,
                        outcome,
                        context,
                        self.engine,
                        retry_number=snap.attempt,
                    )
                )
            except TemplateError as e:
                return self._fail(snap, e.to_dict())
            if d.set_iter:
                snap.iter = apply_patch(snap.iter or {}, d.set_iter)
            if d.set_ctx:
                snap.ctx_patches.append(d.set_ctx)
                ctx = apply_patch(ctx, d.set_ctx)
            failed = await self._follow(d, task, outcome, snap)
            if failed is not None:
                return failed
            if self.checkpoint and snap.pc < len(tasks):
                await self.checkpoint(snap)  # after the last task the terminal event says it all
        return RunResult(ok=True, result=snap.prev, ctx_patches=snap.ctx_patches, iter=snap.iter)

    async def _follow(
        self, d: Directive, task: Task, outcome: dict[str, Any], snap: Snapshot
    ) -> RunResult | None:
        """Move ``snap`` as the task policy's directive says; the run's result when it ends it
        as failed (``retry`` out of attempts, ``fail``), else None."""
        result = outcome.get("result")
        if d.do == "retry":
            if snap.attempt >= d.attempts:
                exhausted = RetriesExhaustedError(
                    f"task {task.name} of step {self.step.name} failed {snap.attempt} times "
                    f"(attempts: {d.attempts})",
                    cause=_strip(outcome),
                )
                return self._fail(snap, exhausted.to_dict())
            await self.sleep(d.delay_seconds)
            snap.attempt += 1
        elif d.do == "jump":
            snap.pc, snap.attempt = self.step.task_index(d.to or ""), 1
            snap.labels[task.name] = result
        elif d.do == "break":
            snap.prev = result
            snap.labels[task.name] = result
            snap.pc = len(self.step.tool)
        elif d.do == "fail":
            failure = outcome.get("error") if outcome.get("status") == "error" else None
            if not failure:
                failure = PolicyFailError(
                    f"task {task.name} of step {self.step.name}: policy said fail"
                ).to_dict()
            return self._fail(snap, failure)
        else:  # continue
            snap.prev = result
            snap.labels[task.name] = result
            snap.pc, snap.attempt = snap.pc + 1, 1
        return None

    async def _cpu(self, fn: Callable[[], T]) -> T:
        """Template work: on the event loop while the execution's templates are quick; once one
        call took longer than ``SLOW_RENDER_S``, the execution's template work goes to a thread
        from then on, so heavy templates (bounded by their work budget, but up to ~0.2 s each)
        never hold the worker's other commands, their heartbeats and acks.

        Slow means this thread's CPU time, not the wall clock, and a call during which the
        garbage collector ran is not judged: on a loaded machine the process is descheduled for
        20 ms and more in the middle of a 10 µs render, and a full collection of a busy worker's
        heap takes 30 ms inside whichever allocation triggered it. Judging by either sent whole
        executions of tiny templates to a thread for good (a thread hop per call: 40 % of a busy
        worker's time in an ``exec: local`` loop of noop tasks)."""
        if self.execution_id in _SLOW_EXECUTIONS:
            return await asyncio.to_thread(fn)
        began, gc_runs = time.thread_time(), _GC.runs
        try:
            return fn()
        finally:
            if time.thread_time() - began > SLOW_RENDER_S and _GC.runs == gc_runs:
                if len(_SLOW_EXECUTIONS) >= 10_000:
                    _SLOW_EXECUTIONS.clear()  # forgetting one costs one more slow call on the loop
                _SLOW_EXECUTIONS.add(self.execution_id)

    def _render_fields(self, task: Task, config: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
        return {
            k: (v if k in _RAW_FIELDS else self.engine.render(v, context, f"{task.path}.{k}"))
            for k, v in config.items()
        }

    def _fail(self, snap: Snapshot, error: dict[str, Any]) -> RunResult:
        return RunResult(ok=False, error=error, ctx_patches=snap.ctx_patches, iter=snap.iter)

    async def _run_task(
        self, task: Task, context: dict[str, Any], attempt: int, run_no: int
    ) -> tuple[dict[str, Any], TaskOutput | None]:
        clock = Clock()
        output: TaskOutput | None = None
        kind, config = task.kind, task.config
        try:
            spec = effective_task_spec(self.playbook, self.step, task)
            if kind == "workbook":
                kind, config = resolve_workbook(dict(config), kind, self.playbook.workbook)
                # the template's own spec knobs (timeout, ...) sit under the calling task's spec;
                # they are configuration, never rendered as task fields
                template_spec = scoped(config.pop("spec", None))
                if template_spec:
                    spec = deep_merge(deep_merge(spec, template_spec), scoped(task.spec))
            rendered = await self._cpu(partial(self._render_fields, task, config, context))
            if self.emit:
                await self.emit("task.started", task, run_no, {"kind": kind, "attempt": attempt})
            extra: dict[str, Any] = {"prev": context.get("_prev"), "command_id": self.command_id}
            if self.step.loop is not None and context.get("iter") is not None:
                extra["iter"] = context["iter"]  # a child playbook's iterations see it as iter.parent (§19)
            if task.kind == "python":  # where its code sits in the playbook, for error messages
                extra["code_origin"] = (self.playbook.source, task.line)
            tctx = ToolContext(
                execution_id=self.execution_id,
                step=self.step.name,
                task=task.name,
                spec=spec,
                keychain=self.keychain,
                services=self.services,
                attempt=attempt,
                extra=extra,
            )
            with capturing() as output:  # this run's prints and log records, no other run's
                if tracing.enabled():  # off: this check only
                    outcome = await self._traced(kind, task.name, rendered, tctx)
                else:
                    outcome = await get_tool(kind).run(rendered, tctx)
        except NoetlError as e:
            outcome = {"status": "error", "error": e.to_dict()}
        except Exception as e:  # a bug in a kind must not take the worker down
            outcome = {
                "status": "error",
                "error": ToolError(f"{kind} task {task.name}: {type(e).__name__}: {e}").to_dict(),
            }
        outcome["meta"] = {**clock.meta(task.name, attempt, self.trace_id), **(outcome.get("meta") or {})}
        return outcome, output

    async def _traced(
        self, kind: str, name: str, rendered: dict[str, Any], tctx: ToolContext
    ) -> dict[str, Any]:
        """``task <name>`` with ``tool <kind>`` inside, under the current ``command`` span."""
        trace = self.trace_id or self.execution_id
        attrs = {"execution_id": self.execution_id, "step": self.step.name, "task": name, "kind": kind}
        with tracing.span(f"task {name}", trace, attributes={**attrs, "attempt": tctx.attempt}):
            with tracing.span(f"tool {kind}", trace, attributes=attrs) as sp:
                outcome = await get_tool(kind).run(rendered, tctx)
                if sp is not None:
                    sp.set_attribute("noetl.status", str(outcome.get("status")))
            return outcome


def _strip(outcome: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in outcome.items() if k in ("status", "error", "http", "pg", "py")}
