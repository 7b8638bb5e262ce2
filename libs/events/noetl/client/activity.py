"""What is running in an execution, read one event at a time from the read-side projection
(``noetl.client.projection``, issue 19).

The live progress of ``noetl run``, the line per event of ``noetl events``, the loop counters of
``noetl status`` and the task output of ``noetl logs`` each need to know which step a task event
belongs to (a task event names its task, not its step) and which loop iteration (only
``task.started`` carries the index; ``task.done`` shares its ``task_run_id``). The projection
knows; this says it in the terminal's terms: a step run is known once a step, loop or next event
named it, and a loop's counts are the server's (a stopped iteration is a failed one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from noetl.client.execution_view import StepRun
from noetl.client.projection import Projection

__all__ = ["Activity", "StepRun", "loop_counters", "loop_counts", "read_activity", "task_outputs"]

# the entities whose events make a step run known: a task event alone names no step
_NAMING = ("step", "loop", "next")


class Activity:
    """Feed it an execution's events in log order; it answers from the projection they build."""

    def __init__(self, execution_id: str = "") -> None:
        self.projection = Projection(execution_id)
        self._named: set[str] = set()  # step run ids a step, loop or next event named
        self.finished: dict[str, Any] | None = None

    @property
    def runs(self) -> dict[str, StepRun]:
        """The known step runs by id, in the order they were first seen."""
        return {rid: run for rid, run in self.projection.by_id.items() if rid in self._named}

    def feed(self, ev: Mapping[str, Any]) -> StepRun | None:
        """Fold one event; the known step run it concerns, if any."""
        run = self.projection.feed(ev)
        if ev.get("name") == "workflow.finished":
            self.finished = raw if isinstance(raw := ev.get("payload"), dict) else {}
            return None
        if ev.get("entity_type") in _NAMING and isinstance(ev.get("step_run_id"), str):
            run = self.projection.run(ev)  # known from now on, even by an event the view skips
            self._named.add(run.run_id)
        return run if run is not None and run.run_id in self._named else None

    def step_of(self, ev: Mapping[str, Any]) -> str | None:
        rid = ev.get("step_run_id")
        return self.projection.by_id[rid].step if rid in self._named else None

    def index_of(self, ev: Mapping[str, Any]) -> int | None:
        return self.projection.index_of(ev)

    def loops(self) -> dict[str, list[dict[str, Any]]]:
        """Per loop step, the counters of its runs in the order they started."""
        out: dict[str, list[dict[str, Any]]] = {}
        for run in self.runs.values():
            if run.announced_loop is not None:
                out.setdefault(run.step, []).append(loop_counts(run))
        return out


def loop_counts(run: StepRun) -> dict[str, Any]:
    """``{status, total, done, failed, in_flight}`` of a loop step run, as ``noetl status`` shows it."""
    loop = run.announced_loop
    done, failed = loop.ended_counts() if loop is not None else (0, 0)
    total = loop.total if loop is not None and isinstance(loop.total, int) else None
    status = "running" if run.status == "waiting" else run.status
    return {"status": status, "total": total, "done": done, "failed": failed, "in_flight": run.in_flight}


def read_activity(execution_id: str, events: Sequence[Mapping[str, Any]]) -> Activity:
    """An execution's events fed in log order: one fold that every reading of them renders."""
    activity = Activity(execution_id)
    for ev in events:
        activity.feed(ev)
    return activity


def loop_counters(events: Sequence[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    return read_activity("", events).loops()


def task_outputs(events: Sequence[Mapping[str, Any]], step: str | None = None) -> list[dict[str, Any]]:
    """Every task run that printed or logged something, in log order: ``{step, task, index?,
    attempt?, task_run_id, timestamp, status, output}``; ``output`` is the text or, when it was
    large, its reference (resolve it with ``noetl.events.objects.resolve``)."""
    activity = Activity()
    out: list[dict[str, Any]] = []
    for ev in events:
        activity.feed(ev)
        p = raw if isinstance(raw := ev.get("payload"), dict) else {}
        if ev.get("name") != "task.done" or "output" not in p:
            continue
        at = activity.step_of(ev)
        if step is not None and at != step:
            continue
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
