"""What is running in an execution, folded from its events one at a time (issue 19).

The same fold serves the live progress of ``noetl run``, the loop counters of ``noetl status`` and
the task output of ``noetl logs``: each needs to know which step a task event belongs to (a task
event names its task, not its step) and which loop iteration (only ``task.started`` carries the
index; ``task.done`` shares its ``task_run_id``). It reads events as they are on the wire: fields
without a value are absent, never null.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from noetl.events.vocabulary import EventName

_ENDS = {"step.done": "done", "loop.done": "done", "step.failed": "failed", "step.skipped": "skipped"}


@dataclass
class LoopCounts:
    """A loop step run's iterations: ``running`` are those a worker has started and not ended."""

    total: int | None = None
    done: int = 0
    failed: int = 0
    running: set[int] = field(default_factory=set)
    ended: set[int] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {"total": self.total, "done": self.done, "failed": self.failed, "in_flight": len(self.running)}


@dataclass
class StepRun:
    step: str
    run_id: str
    status: str = "running"  # running, done, failed or skipped
    loop: LoopCounts | None = None
    error: dict[str, Any] | None = None


def _payload(ev: Mapping[str, Any]) -> dict[str, Any]:
    p = ev.get("payload")
    return p if isinstance(p, dict) else {}


class Activity:
    """Feed it an execution's events in log order; it keeps the step runs and their loops."""

    def __init__(self) -> None:
        self.runs: dict[str, StepRun] = {}
        self._task_index: dict[str, int] = {}
        self.finished: dict[str, Any] | None = None

    def feed(self, ev: Mapping[str, Any]) -> StepRun | None:
        """Fold one event; the step run it concerns, if any."""
        name: EventName | None = ev.get("name")  # so each name compared below is checked
        rid, p = ev.get("step_run_id"), _payload(ev)
        if name == "workflow.finished":
            self.finished = p
            return None
        if not isinstance(rid, str):
            return None
        run = self.runs.get(rid)
        if run is None and ev.get("entity_type") in ("step", "loop", "next"):
            run = self.runs[rid] = StepRun(str(ev.get("entity_id", "")), rid)
        if run is None:
            return None
        if name == "loop.started":
            run.loop = LoopCounts(total=p.get("total") if isinstance(p.get("total"), int) else None)
        elif name == "task.started":
            index = p.get("index")
            if isinstance(index, int):
                if isinstance(ev.get("task_run_id"), str):
                    self._task_index[ev["task_run_id"]] = index
                if run.loop is not None and index not in run.loop.ended:
                    run.loop.running.add(index)
        elif name in ("loop.iteration.done", "loop.iteration.failed") and run.loop is not None:
            index = p.get("index")
            if isinstance(index, int) and index not in run.loop.ended:  # a redelivery repeats it
                run.loop.ended.add(index)
                run.loop.running.discard(index)
                if name == "loop.iteration.done":
                    run.loop.done += 1
                else:
                    run.loop.failed += 1
        elif name in _ENDS and run.status == "running":
            run.status = _ENDS[name]
            if name == "step.failed":
                run.error = p.get("error")
            if run.loop is not None:
                run.loop.running.clear()
                for key in ("total", "done", "failed"):  # the server's count is the last word
                    if isinstance(p.get(key), int):
                        setattr(run.loop, key, p[key])
        return run

    def step_of(self, ev: Mapping[str, Any]) -> str | None:
        run = self.runs.get(ev.get("step_run_id") or "")
        return run.step if run is not None else None

    def index_of(self, ev: Mapping[str, Any]) -> int | None:
        """The loop iteration an event is about: its payload's ``index``, or for a task event the
        index its run's ``task.started`` gave."""
        index = _payload(ev).get("index")
        if isinstance(index, int):
            return index
        return self._task_index.get(ev.get("task_run_id") or "")

    def loops(self) -> dict[str, list[dict[str, Any]]]:
        """Per loop step, the counters of its runs in the order they started."""
        out: dict[str, list[dict[str, Any]]] = {}
        for run in self.runs.values():
            if run.loop is not None:
                out.setdefault(run.step, []).append({"status": run.status, **run.loop.as_dict()})
        return out


def loop_counters(events: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    activity = Activity()
    for ev in events:
        activity.feed(ev)
    return activity.loops()


def task_outputs(events: Sequence[Mapping[str, Any]], step: str | None = None) -> list[dict[str, Any]]:
    """Every task run that printed or logged something, in log order: ``{step, task, index?,
    attempt?, task_run_id, timestamp, status, output}``; ``output`` is the text or, when it was
    large, its reference (resolve it with ``noetl.events.objects.resolve``)."""
    activity = Activity()
    out: list[dict[str, Any]] = []
    for ev in events:
        activity.feed(ev)
        if ev.get("name") != "task.done" or "output" not in _payload(ev):
            continue
        at = activity.step_of(ev)
        if step is not None and at != step:
            continue
        p = _payload(ev)
        entry: dict[str, Any] = {"step": at, "task": p.get("task", ev.get("entity_id"))}
        index = activity.index_of(ev)
        if index is not None:
            entry["index"] = index
        attempt = ((p.get("outcome") or {}).get("meta") or {}).get("attempt")
        if isinstance(attempt, int):
            entry["attempt"] = attempt
        entry.update(
            task_run_id=ev.get("task_run_id"),
            timestamp=ev.get("timestamp"),
            status=ev.get("status"),
            output=p["output"],
        )
        out.append(entry)
    return out
