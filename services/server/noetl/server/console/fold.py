"""An execution's events folded into what the console draws: step runs, their tasks, loop progress.

The console reads the same log as the API and keeps nothing of its own, so a page shows the same
thing on any server replica and after a restart. This fold is deliberately forgiving: it never
raises on an event it does not know or one that arrives out of the expected order (a worker's
events can land after the server's reaction to them), because a console that fails on one odd
event hides everything else.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from noetl.client.iterations import STOP_KINDS
from noetl.client.view import waiting_for
from noetl.events.vocabulary import EventName

_TERMINAL = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}
# the order a step's status is picked in when it has several runs: what needs attention first
_PRIORITY = ("waiting", "running", "failed", "stopped", "done", "skipped")
# a run that has not ended: running, or waiting for its signal (SEMANTICS §17)
_OPEN = ("running", "waiting")


def parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def duration_ms(start: Any, end: Any) -> float | None:
    a, b = parse_ts(start), parse_ts(end)
    if a is None or b is None:
        return None
    return max((b - a).total_seconds() * 1000.0, 0.0)


@dataclass
class TaskRun:
    label: str
    kind: str | None = None
    attempt: int | None = None
    status: str = "running"  # running, then the outcome's status (ok, error, timeout, ...)
    started: str | None = None
    ended: str | None = None
    result: Any = None
    error: dict[str, Any] | None = None
    duration_ms: float | None = None
    output: str | None = None  # what the task printed or logged (masked, capped), or where it is
    index: int | None = None  # the loop iteration it ran in
    child: str | None = None  # the child execution a ``kind: playbook`` task started


@dataclass
class LoopProgress:
    total: int | None = None
    mode: str | None = None
    done: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    # ended by a cancel, an abort or a timeout rather than failing on their own: not failures
    stopped: set[int] = field(default_factory=set)
    final: tuple[int, int] | None = None  # (done, failed) as the server counted them at the end

    @property
    def done_count(self) -> int:
        return self.final[0] if self.final else len(self.done)

    @property
    def failed_count(self) -> int:
        # the server counts a stopped iteration as failed: the console does not
        return max(self.final[1] - len(self.stopped), 0) if self.final else len(self.failed)

    def text(self) -> str:
        total = "?" if self.total is None else str(self.total)
        out = f"{self.done_count}/{total} done"
        out += f" · {self.failed_count} failed" if self.failed_count else ""
        return out + (f" · {len(self.stopped)} stopped" if self.stopped else "")


@dataclass
class StepRun:
    step: str
    run_id: str
    status: str = "running"
    started: str | None = None
    ended: str | None = None
    worker: str | None = None
    args: Any = None
    result: Any = None
    error: dict[str, Any] | None = None
    loop: LoopProgress | None = None
    tasks: list[TaskRun] = field(default_factory=list)

    @property
    def duration_ms(self) -> float | None:
        return duration_ms(self.started, self.ended)


@dataclass(frozen=True)
class Wait:
    """A step run waiting for a signal (``lifecycle.await``): what a person has to send, and by
    when, before the step fails with ``signal_timeout``."""

    step: str
    run_id: str
    signal: str
    since: str | None
    timeout_s: float | None

    @property
    def until(self) -> str | None:
        start = parse_ts(self.since)
        if start is None or not isinstance(self.timeout_s, int | float) or self.timeout_s <= 0:
            return None
        return (start + timedelta(seconds=self.timeout_s)).isoformat()


@dataclass
class ExecutionView:
    execution_id: str
    status: str = "running"
    path: str | None = None
    version: str | None = None
    playbook: str | None = None  # the catalog path, or the name of an inline playbook
    requested_at: str | None = None
    finished_at: str | None = None
    last_at: str | None = None
    parent_execution_id: str | None = None
    payload: Any = None
    result: Any = None
    ctx: Any = None
    error: dict[str, Any] | None = None
    cancel_requested: str | None = None  # the reason, once a cancel was recorded
    paused: bool = False  # execution.paused seen and no execution.resumed after it (SEMANTICS §17)
    schedule: str | None = None  # the schedule whose fire started it (SEMANTICS §18)
    waiting: list[Wait] = field(default_factory=list)  # the signals its step runs wait for now
    runs: list[StepRun] = field(default_factory=list)
    arcs: Counter[tuple[str, int]] = field(default_factory=Counter)  # (step, arc index) -> fired
    events: int = 0
    finished: bool = False  # playbook.processed seen: nothing more will come
    # no event for a while, waiting for nothing declared (``noetl.client.stalls``); set by the page
    stalled: dict[str, Any] | None = None
    # lineage (issue 31): the rerun's execution.forked payload; reruns and children set by the page
    forked: dict[str, Any] | None = None
    reruns: list[dict[str, Any]] = field(default_factory=list)
    children: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration_ms(self) -> float | None:
        """Until now while it runs (a waiting execution's time goes on), else until its end."""
        if self.finished_at is None and self.requested_at is not None:
            return duration_ms(self.requested_at, datetime.now(UTC).isoformat())
        return duration_ms(self.requested_at, self.finished_at or self.last_at)

    @property
    def root_cause(self) -> StepRun | None:
        """The first failed step run when the execution's own error is a later one: a failure
        handled by an arc that led to the failure that ended it (a ``python_error`` routed to a
        step whose template then failed). The headline stays the error that ended it."""
        if self.error is None:
            return None
        first = next((r for r in self.runs if r.status == "failed" and r.error), None)
        if first is None or (first.error or {}).get("message") == self.error.get("message"):
            return None
        return first

    def step_runs(self, step: str) -> list[StepRun]:
        return [r for r in self.runs if r.step == step]

    def step_state(self, step: str) -> tuple[str, str]:
        """(status, detail) of a graph node: the most pressing status of its runs and a short line."""
        runs = self.step_runs(step)
        if not runs:
            return "notrun", "not run"
        statuses = {r.status for r in runs}
        if statuses == {"skipped"} and self.finished_at is None:
            # not admitted yet: a join waiting for its other branches, not a step that was skipped
            return "notrun", f"not admitted yet ({len(runs)}x)"
        status = next((s for s in _PRIORITY if s in statuses), "notrun")
        loops = [r.loop for r in runs if r.loop is not None]
        if loops:
            detail = loops[-1].text()
        elif status == "waiting":
            signals = sorted({w.signal for w in self.waiting if w.step == step})
            detail = "waits for " + (", ".join(signals) or "a signal")
        elif len(runs) == 1:
            d = runs[0].duration_ms
            detail = runs[0].status + (f" {format_ms(d)}" if d is not None and runs[0].ended else "")
        else:
            counts = Counter(r.status for r in runs)
            detail = ", ".join(f"{s} {n}x" for s, n in counts.items())
        return status, detail


def format_ms(ms: float | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(int(ms / 1000), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    return f"{minutes // 60} h {minutes % 60} min"


def _run(view: ExecutionView, by_id: dict[str, StepRun], ev: Mapping[str, Any]) -> StepRun:
    rid = str(ev.get("step_run_id") or "")
    run = by_id.get(rid)
    if run is None:  # a step that failed before it was scheduled, or an event read out of order
        run = by_id[rid] = StepRun(str(ev.get("entity_id")), rid, started=ev.get("timestamp"))
        view.runs.append(run)
    return run


def fold(execution_id: str, events: Sequence[Mapping[str, Any]]) -> ExecutionView:
    view = ExecutionView(execution_id)
    by_id: dict[str, StepRun] = {}
    tasks: dict[str, TaskRun] = {}
    for ev in events:
        name: EventName | None = ev.get("name")  # so each name compared below is checked
        payload = raw if isinstance(raw := ev.get("payload"), dict) else {}
        view.events += 1
        view.last_at = ev.get("timestamp") or view.last_at
        if name == "playbook.execution.requested":
            view.requested_at = ev.get("timestamp")
            view.path, view.version = payload.get("path"), payload.get("version")
            view.playbook = ev.get("entity_id") or view.path
            view.parent_execution_id = ev.get("parent_execution_id")
            view.payload = payload.get("payload")
            view.schedule = payload.get("schedule") if isinstance(payload.get("schedule"), str) else None
        elif name == "step.waiting":
            run = _run(view, by_id, ev)
            run.args = payload.get("args")
            if run.status == "running":
                run.status = "waiting"
        elif name in ("step.scheduled", "step.skipped"):
            run = _run(view, by_id, ev)
            run.args = payload.get("args")
            if run.status == "waiting":  # its signal came: the run starts now
                run.status = "running"
            if name == "step.skipped":
                run.status, run.ended = "skipped", ev.get("timestamp")
        elif name == "step.started":
            run = _run(view, by_id, ev)
            run.worker = payload.get("worker") or run.worker
        elif name == "loop.started":
            run = _run(view, by_id, ev)
            run.loop = LoopProgress(total=payload.get("total"), mode=payload.get("mode"))
        elif name in ("loop.iteration.done", "loop.iteration.failed"):
            run = _run(view, by_id, ev)
            run.loop = run.loop or LoopProgress()
            index = payload.get("index")
            error = (_d if isinstance(_d := payload.get("error"), dict) else {})
            if isinstance(index, int) and name == "loop.iteration.done":
                run.loop.done.add(index)
            elif isinstance(index, int):
                (run.loop.stopped if error.get("kind") in STOP_KINDS else run.loop.failed).add(index)
            run.worker = payload.get("worker") or run.worker
        elif name in _TERMINAL:
            run = _run(view, by_id, ev)
            if run.status in _OPEN:
                run.status, run.ended = _TERMINAL[name], ev.get("timestamp")
                run.result = payload.get("result")
                run.error = (_d if isinstance(_d := payload.get("error"), dict) else None)
                run.worker = payload.get("worker") or run.worker
            if "total" in payload and ("done" in payload or "failed" in payload):
                run.loop = run.loop or LoopProgress()
                run.loop.total = payload.get("total")
                run.loop.final = (int(payload.get("done") or 0), int(payload.get("failed") or 0))
        elif name == "task.started":
            run = _run(view, by_id, ev)
            task = TaskRun(
                str(payload.get("task") or ev.get("entity_id")),
                kind=payload.get("kind"),
                attempt=payload.get("attempt"),
                started=ev.get("timestamp"),
                index=payload.get("index") if isinstance(payload.get("index"), int) else None,
            )
            tasks[str(ev.get("task_run_id"))] = task
            run.tasks.append(task)
        elif name == "task.done":
            run = _run(view, by_id, ev)
            found = tasks.get(str(ev.get("task_run_id")))
            if found is not None:
                task = found
            else:
                task = tasks[str(ev.get("task_run_id"))] = TaskRun(
                    str(payload.get("task") or ev.get("entity_id"))
                )
                run.tasks.append(task)
            outcome = raw if isinstance(raw := payload.get("outcome"), dict) else {}
            meta = raw if isinstance(raw := outcome.get("meta"), dict) else {}
            task.status = str(outcome.get("status") or ev.get("status") or "done")
            task.ended, task.result = ev.get("timestamp"), outcome.get("result")
            task.error = (_d if isinstance(_d := outcome.get("error"), dict) else None)
            task.attempt = task.attempt or meta.get("attempt")
            task.duration_ms = (
                meta.get("duration_ms") if isinstance(meta.get("duration_ms"), int | float) else None
            )
            child = (_d if isinstance(_d := outcome.get("child"), dict) else {})
            if isinstance(child.get("execution_id"), str):
                task.child = child["execution_id"]
            printed = payload.get("output")
            if isinstance(printed, str):
                task.output = printed
            elif printed is not None:  # large: stored by reference in the results bucket
                task.output = f"(large output stored by reference: noetl logs {ev.get('execution_id')})"
        elif name == "next.evaluated":
            for fired in payload.get("fired") or []:
                if isinstance(fired, dict) and isinstance(fired.get("arc"), int):
                    view.arcs[(str(ev.get("entity_id")), fired["arc"])] += 1
        elif name == "execution.forked":
            view.forked = payload
        elif name == "execution.cancel.requested":
            view.cancel_requested = str(payload.get("reason") or "cancel requested")
        elif name in ("execution.paused", "execution.resumed"):
            view.paused = name == "execution.paused"
        elif name == "workflow.finished":
            view.status = str(payload.get("status") or "failed")
            view.finished_at = ev.get("timestamp")
            view.result, view.ctx = payload.get("result"), payload.get("ctx")
            view.error = (_d if isinstance(_d := payload.get("error"), dict) else None)
        elif name == "playbook.processed":
            view.finished = True
    if view.finished_at is not None:  # runs the execution left behind (cancelled, failed) stop here
        for run in view.runs:
            if run.status in _OPEN:
                run.status, run.ended = "stopped", view.finished_at
    view.waiting = [
        Wait(str(w["step"]), str(w["step_run_id"]), str(w["signal"]), w.get("since"), w.get("timeout_s"))
        for w in waiting_for(events)["signals"]
        if w.get("step") and w.get("signal")
    ]
    return view


def _tick(ms: float, span: float) -> str:
    if not ms:
        return "0"
    return f"{ms:.1f} ms" if span < 20 else format_ms(ms)


@dataclass
class Bar:
    run: StepRun
    x: float
    w: float
    y: float


@dataclass
class Timeline:
    bars: list[Bar]
    width: float
    height: float
    ticks: list[tuple[float, str]]
    hidden: int  # runs past the drawing limit (all are still listed below the chart)


def timeline(
    view: ExecutionView, *, width: float = 900.0, label_w: float = 180.0, limit: int = 200
) -> Timeline:
    """Step runs as bars on one time axis from the request to the end (or the latest event)."""
    row_h, top = 20.0, 22.0
    end = view.finished_at or view.last_at
    span = max(duration_ms(view.requested_at, end) or 0.0, 1.0)
    scale = (width - label_w - 12) / span
    bars = []
    for i, run in enumerate(view.runs[:limit]):
        start = duration_ms(view.requested_at, run.started) or 0.0
        stop = duration_ms(view.requested_at, run.ended or end) or start
        bars.append(Bar(run, label_w + start * scale, max((stop - start) * scale, 3.0), top + i * row_h))
    ticks = [(label_w + f * span * scale, _tick(f * span, span)) for f in (0, 0.25, 0.5, 0.75, 1)]
    return Timeline(bars, width, top + len(bars) * row_h + 6, ticks, max(len(view.runs) - limit, 0))
