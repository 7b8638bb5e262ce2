"""The read side: an execution's events folded into one typed view (``ExecutionView``): its status,
step runs with their tasks, loops and iterations, the signals it waits for and whether it is
paused, errors, result and ctx, and lineage (the fork it came from; reruns and children are set
by whoever reads those). Every reading of an execution renders it rather than folding the events
again, so two readings cannot disagree (docs/architecture.md, "The projection"): the console
(``noetl.server.console``), the ``--json`` output and ``noetl status`` (``noetl.client.view``),
the iteration and task pages (``noetl.client.iterations``), and the terminal's live progress,
event lines and task output (``noetl.client.activity``, which they read through).

The view keeps nothing of its own, so a page shows the same thing on any server replica and after
a restart. This fold is deliberately forgiving: it never raises on an event it does not know or
one that arrives out of the expected order (a worker's events can land after the server's
reaction to them), because a view that fails on one odd event hides everything else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from noetl.client.execution_view import (
    OPEN,
    STOP_KINDS,
    ExecutionView,
    Iteration,
    LoopProgress,
    StepRun,
    TaskRun,
    Wait,
    duration_ms,
    format_ms,
    parse_ts,
)
from noetl.events.vocabulary import EventName

_TERMINAL = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}


class Projection:
    """The fold in progress, fed one event at a time: a reader that follows a live execution
    (``noetl run``'s progress, ``noetl events``) asks it which step and iteration the event it
    just fed belongs to, and reads the view as it is so far."""

    def __init__(self, execution_id: str = "") -> None:
        self.view = ExecutionView(execution_id)
        self.by_id: dict[str, StepRun] = {}
        self.tasks: dict[str, TaskRun] = {}  # by task run id, including those only seen ending
        # step run id -> the signal it waits for (SEMANTICS §17), as ``waiting_for`` reports it
        self.waits: dict[str, dict[str, Any]] = {}
        self.ended = False  # workflow.finished seen: waits and pauses are over
        self.paused = False  # as of workflow.finished, when it came

    def feed(self, ev: Mapping[str, Any]) -> StepRun | None:
        """Fold one event (``_ON`` says what each does); the step run it concerns, if any."""
        view = self.view
        view.events += 1
        view.last_at = ev.get("timestamp") or view.last_at
        handler = _ON.get(str(ev.get("name")))
        if handler is not None:
            handler(self, ev, raw if isinstance(raw := ev.get("payload"), dict) else {})
        return self.run_of(ev)

    def run(self, ev: Mapping[str, Any]) -> StepRun:
        rid = str(ev.get("step_run_id") or "")
        run = self.by_id.get(rid)
        if run is None:  # a step that failed before it was scheduled, or an event read out of order
            run = self.by_id[rid] = StepRun(str(ev.get("entity_id")), rid, started=ev.get("timestamp"))
            self.view.runs.append(run)
        return run

    def run_of(self, ev: Mapping[str, Any]) -> StepRun | None:
        rid = ev.get("step_run_id")
        return self.by_id.get(rid) if isinstance(rid, str) else None

    def index_of(self, ev: Mapping[str, Any]) -> int | None:
        """The loop iteration an event is about: its payload's ``index``, or for a task event the
        index its run's ``task.started`` gave (``task.done`` shares its ``task_run_id``)."""
        payload = ev.get("payload")
        index = payload.get("index") if isinstance(payload, dict) else None
        if isinstance(index, int):
            return index
        task = self.tasks.get(str(ev.get("task_run_id") or ""))
        return task.index if task is not None else None

    def settle(self) -> ExecutionView:
        """The view once every event is in: runs and iterations the execution left behind
        (cancelled, failed) stop at its end, and the waits are listed."""
        view = self.view
        if view.finished_at is not None:
            for run in view.runs:
                if run.status in OPEN:
                    run.status, run.ended = "stopped", view.finished_at
                if run.loop is not None:
                    _stop_iterations(run.loop, view.finished_at)
        view.waiting = [
            Wait(str(w["step"]), str(w["step_run_id"]), str(w["signal"]), w.get("since"), w.get("timeout_s"))
            for w in self.waits.values()
            if w.get("step") and w.get("signal")
        ]
        return view


def _stop_iterations(loop: LoopProgress, at: str) -> None:
    for index in loop.running:
        loop.rows[index].status, loop.rows[index].ended = "stopped", at
    loop.running.clear()


Payload = dict[str, Any]


def _dict_or_none(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _requested(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    view = f.view
    view.requested_at = ev.get("timestamp")
    view.path, view.version = payload.get("path"), payload.get("version")
    view.playbook = ev.get("entity_id") or view.path
    view.parent_execution_id = ev.get("parent_execution_id")
    view.payload = payload.get("payload")
    view.schedule = payload.get("schedule") if isinstance(payload.get("schedule"), str) else None


def _waiting(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    rid = ev.get("step_run_id")
    if rid and not f.ended:
        f.waits[rid] = {
            "step": ev.get("entity_id"),
            "step_run_id": rid,
            "signal": payload.get("signal"),
            "since": ev.get("timestamp"),
            "timeout_s": payload.get("timeout_s"),
        }
    run = f.run(ev)
    run.args = payload.get("args")
    if run.status == "running":
        run.status = "waiting"


def _scheduled(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    if ev.get("name") == "step.scheduled" and ev.get("step_run_id"):
        f.waits.pop(ev["step_run_id"], None)
    run = f.run(ev)
    run.args = payload.get("args")
    if run.status == "waiting":  # its signal came: the run starts now
        run.status = "running"
    if ev.get("name") == "step.skipped":
        run.status, run.ended = "skipped", ev.get("timestamp")
    _list(f, ev, run)


def _list(f: Projection, ev: Mapping[str, Any], run: StepRun) -> None:
    if ev.get("step_run_id") and run.listed is None:
        run.listed = f.view.events


def _started(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    run = f.run(ev)
    run.worker = payload.get("worker") or run.worker


def _loop_started(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    loop = LoopProgress(total=payload.get("total"), mode=payload.get("mode"), announced=True)
    f.run(ev).loop = loop


def _iteration(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    run = f.run(ev)
    run.loop = run.loop or LoopProgress()
    index = payload.get("index")
    error = _dict_or_none(payload.get("error"))
    stopped = (error or {}).get("kind") in STOP_KINDS
    if isinstance(index, int) and ev.get("name") == "loop.iteration.done":
        run.loop.done.add(index)
    elif isinstance(index, int):
        (run.loop.stopped if stopped else run.loop.failed).add(index)
    run.worker = payload.get("worker") or run.worker
    if not isinstance(index, int):
        return
    row = run.loop.rows.setdefault(index, Iteration(index, started=ev.get("timestamp")))
    run.loop.running.discard(index)
    row.ended = ev.get("timestamp")
    row.worker = payload.get("worker") or row.worker
    if ev.get("name") == "loop.iteration.done":
        row.status = "done"
    else:
        row.status, row.error = "stopped" if stopped else "failed", error
    row.duration_ms = duration_ms(row.started, row.ended)


def _terminal(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    if ev.get("name") == "step.failed" and ev.get("step_run_id"):
        f.waits.pop(ev["step_run_id"], None)
    run = f.run(ev)
    _list(f, ev, run)
    if run.status in OPEN:
        run.status, run.ended = _TERMINAL[str(ev.get("name"))], ev.get("timestamp")
        run.result = payload.get("result")
        run.error = _dict_or_none(payload.get("error"))
        run.worker = payload.get("worker") or run.worker
    if "total" in payload and ("done" in payload or "failed" in payload):
        run.loop = run.loop or LoopProgress()
        run.loop.total = payload.get("total")
        run.loop.final = (int(payload.get("done") or 0), int(payload.get("failed") or 0))


def _task_started(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    run = f.run(ev)
    tid = str(ev.get("task_run_id") or "")
    task = TaskRun(
        str(payload.get("task") or ev.get("entity_id")),
        kind=payload.get("kind"),
        attempt=payload.get("attempt"),
        started=ev.get("timestamp"),
        index=payload.get("index") if isinstance(payload.get("index"), int) else None,
        task_run_id=tid,
        step_run_id=run.run_id,
    )
    f.tasks[tid] = f.view.tasks[tid] = task
    run.tasks.append(task)
    if run.loop is not None and task.index is not None:
        row = run.loop.rows.setdefault(task.index, Iteration(task.index, started=task.started))
        row.tasks += 1
        if row.status == "running":
            run.loop.running.add(task.index)
        if isinstance(task.attempt, int):
            row.attempts = max(row.attempts, task.attempt)


def _task_done(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    run = f.run(ev)
    tid = str(ev.get("task_run_id") or "")
    task = f.tasks.get(tid)
    if task is None:
        label = str(payload.get("task") or ev.get("entity_id"))
        task = f.tasks[tid] = TaskRun(label, task_run_id=tid, step_run_id=run.run_id)
        run.tasks.append(task)
    outcome = _dict_or_none(payload.get("outcome")) or {}
    meta = _dict_or_none(outcome.get("meta")) or {}
    task.status = str(outcome.get("status") or ev.get("status") or "done")
    task.ended, task.result = ev.get("timestamp"), outcome.get("result")
    task.error = _dict_or_none(outcome.get("error"))
    task.attempt = task.attempt or meta.get("attempt")
    task.duration_ms = meta.get("duration_ms") if isinstance(meta.get("duration_ms"), int | float) else None
    child = _dict_or_none(outcome.get("child")) or {}
    if isinstance(child.get("execution_id"), str):
        task.child = child["execution_id"]
    printed = payload.get("output")
    if isinstance(printed, str):
        task.output = printed
    elif printed is not None:  # large: stored by reference in the results bucket
        task.output = f"(large output stored by reference: noetl logs {ev.get('execution_id')})"


def _arcs(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    for fired in payload.get("fired") or []:
        if isinstance(fired, dict) and isinstance(fired.get("arc"), int):
            f.view.arcs[(str(ev.get("entity_id")), fired["arc"])] += 1


def _forked(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    f.view.forked = payload


def _cancel(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    f.view.cancel_requested = str(payload.get("reason") or "cancel requested")


def _pause(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    f.view.paused = ev.get("name") == "execution.paused"
    if not f.ended:
        f.paused = f.view.paused


def _finished(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    f.ended = True
    f.waits.clear()
    view = f.view
    # a request refused before it was recorded has no request event: its end names the parent
    view.parent_execution_id = view.parent_execution_id or ev.get("parent_execution_id")
    view.status = str(payload.get("status") or "failed")
    view.finished_at = ev.get("timestamp")
    view.result, view.ctx = payload.get("result"), payload.get("ctx")
    view.error = _dict_or_none(payload.get("error"))


def _processed(f: Projection, ev: Mapping[str, Any], payload: Payload) -> None:
    f.view.finished = True


# what each event does to the view; any other event only counts (keys checked against the
# vocabulary by ``_checked``)
_ON: dict[str, Callable[[Projection, Mapping[str, Any], Payload], None]] = {
    "playbook.execution.requested": _requested,
    "step.waiting": _waiting,
    "step.scheduled": _scheduled,
    "step.skipped": _scheduled,
    "step.started": _started,
    "loop.started": _loop_started,
    "loop.iteration.done": _iteration,
    "loop.iteration.failed": _iteration,
    "step.done": _terminal,
    "loop.done": _terminal,
    "step.failed": _terminal,
    "task.started": _task_started,
    "task.done": _task_done,
    "next.evaluated": _arcs,
    "execution.forked": _forked,
    "execution.cancel.requested": _cancel,
    "execution.paused": _pause,
    "execution.resumed": _pause,
    "workflow.finished": _finished,
    "playbook.processed": _processed,
}


_checked: tuple[EventName, ...] = (
    "playbook.execution.requested",
    "step.waiting",
    "step.scheduled",
    "step.skipped",
    "step.started",
    "loop.started",
    "loop.iteration.done",
    "loop.iteration.failed",
    "step.done",
    "loop.done",
    "step.failed",
    "task.started",
    "task.done",
    "next.evaluated",
    "execution.forked",
    "execution.cancel.requested",
    "execution.paused",
    "execution.resumed",
    "workflow.finished",
    "playbook.processed",
)
assert set(_checked) == set(_ON), "the fold's table and its checked names differ"


__all__ = [
    "STOP_KINDS",
    "ExecutionView",
    "Iteration",
    "LoopProgress",
    "Projection",
    "StepRun",
    "TaskRun",
    "Wait",
    "duration_ms",
    "fold",
    "folded",
    "format_ms",
    "parse_ts",
    "waits_of",
]


def fold(execution_id: str, events: Sequence[Mapping[str, Any]]) -> ExecutionView:
    """The view of an execution from its events, in log order, settled (``Projection.settle``)."""
    return folded(execution_id, events).settle()


def folded(execution_id: str, events: Sequence[Mapping[str, Any]]) -> Projection:
    """The projection fed every event and not settled: runs and iterations still open when the
    execution finished stay as the log left them, which is what the terminal reports."""
    p = Projection(execution_id)
    for ev in events:
        p.feed(ev)
    return p


def waiting_for(events: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What a running execution waits for (SEMANTICS §17): the signals its step runs await, and
    whether it is paused; a renderer over the fold (``noetl.client.view.waiting_for``)."""
    return waits_of(folded("", events))


def waits_of(p: Projection) -> dict[str, Any]:
    """``waiting_for`` of a projection a reader already fed: a status answer folds its events once."""
    if p.ended:
        return {"signals": [], "paused": False}
    return {"signals": list(p.waits.values()), "paused": p.paused}
