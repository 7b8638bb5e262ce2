"""The typed view of one execution that the read side builds (``noetl.client.projection.fold``):
status, step runs with tasks and loop progress, waits, errors, result, ctx, lineage."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

# the order a step's status is picked in when it has several runs: what needs attention first
_PRIORITY = ("waiting", "running", "failed", "stopped", "done", "skipped")
# errors that end an iteration without it having failed on its own (a cancel or an abort
# stopped it): shown as ``stopped``, not as a failure to look into
STOP_KINDS = frozenset({"cancelled", "aborted", "step_timeout", "execution_timeout"})
# a step run that has not ended: running, or waiting for its signal (SEMANTICS §17)
OPEN = ("running", "waiting")


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
    task_run_id: str | None = None
    step_run_id: str | None = None


@dataclass
class Iteration:
    """One loop iteration as its events tell it: the row a person pages through to find the one
    that failed (``noetl.client.iterations``). ``duration_ms`` is fixed when it ends; one still
    running when the execution finished is ``stopped`` then, with no duration."""

    index: int
    started: str | None = None
    status: str = "running"  # then done, failed, or stopped (ended by a cancel, abort or timeout)
    attempts: int = 0  # the highest attempt of its task runs
    tasks: int = 0  # task runs started in it
    ended: str | None = None
    duration_ms: float | None = None
    error: dict[str, Any] | None = None
    worker: str | None = None


@dataclass
class LoopProgress:
    total: int | None = None
    mode: str | None = None
    done: set[int] = field(default_factory=set)
    failed: set[int] = field(default_factory=set)
    # ended by a cancel, an abort or a timeout rather than failing on their own: not failures
    stopped: set[int] = field(default_factory=set)
    final: tuple[int, int] | None = None  # (done, failed) as the server counted them at the end
    announced: bool = False  # loop.started seen, not only iterations or counts of a run
    rows: dict[int, Iteration] = field(default_factory=dict)
    # the rows still ``running``, kept as they change: a status line redrawn ten times a second
    # must not scan a million rows
    running: set[int] = field(default_factory=set)

    def ended_counts(self) -> tuple[int, int]:
        """(done, failed) as the server counts them (a stopped iteration is a failed one): the
        terminal's numbers, which it reports in its own words."""
        if self.final:
            return self.final
        return len(self.done), len(self.failed | self.stopped)

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
    # where in the log it was first scheduled, skipped or ended (1-based): SEMANTICS §15 lists a
    # step's runs in that order, and not a run only announced as waiting for its signal
    listed: int | None = None

    @property
    def duration_ms(self) -> float | None:
        return duration_ms(self.started, self.ended)

    @property
    def announced_loop(self) -> LoopProgress | None:
        """Its loop once ``loop.started`` said so: what a terminal counts iterations of."""
        return self.loop if self.loop is not None and self.loop.announced else None

    @property
    def in_flight(self) -> int:
        """Iterations running now: none once the run itself ended."""
        loop = self.announced_loop
        return len(loop.running) if loop is not None and self.status in OPEN else 0


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
    # every task run by its id, in the order they started (``task.started`` only)
    tasks: dict[str, TaskRun] = field(default_factory=dict)
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
