"""Which arcs fired and which tasks ran, read from an execution's events.

`next.evaluated` names the arcs that fired (by index, on the source step's run), `task.done`
the tasks that ran (by label, on a step run); `step.scheduled`/`step.skipped` tie a run id to
its step. The same reading serves `noetl graph --execution` and the coverage of `noetl test`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from noetl.dsl.model import Playbook

_TERMINAL = {"step.done": "done", "loop.done": "done", "step.failed": "failed"}


@dataclass
class Run:
    step: str
    status: str = "running"
    started: str | None = None
    ended: str | None = None

    @property
    def duration_ms(self) -> float | None:
        if not self.started or not self.ended:
            return None
        try:
            a = datetime.fromisoformat(self.started.replace("Z", "+00:00"))
            b = datetime.fromisoformat(self.ended.replace("Z", "+00:00"))
        except ValueError:
            return None
        return max((b - a).total_seconds() * 1000.0, 0.0)


@dataclass
class Trace:
    arcs: Counter[tuple[str, int]] = field(default_factory=Counter)  # (step, arc index) → times fired
    tasks: Counter[tuple[str, str]] = field(default_factory=Counter)  # (step, task label) → runs
    runs: dict[str, Run] = field(default_factory=dict)  # step_run_id → run, in arrival order

    def step_runs(self, step: str) -> list[Run]:
        return [r for r in self.runs.values() if r.step == step]


def trace(events: Sequence[Mapping[str, Any]]) -> Trace:
    t = Trace()
    for ev in events:
        name, rid = ev.get("name"), ev.get("step_run_id") or ""
        payload = ev.get("payload") or {}
        if name in ("step.scheduled", "step.skipped") and rid not in t.runs:
            run = t.runs[rid] = Run(str(ev.get("entity_id")), started=ev.get("timestamp"))
            if name == "step.skipped":
                run.status, run.ended = "skipped", ev.get("timestamp")
        elif name in _TERMINAL:
            run = t.runs.setdefault(rid, Run(str(ev.get("entity_id")), started=ev.get("timestamp")))
            if run.status == "running":
                run.status, run.ended = _TERMINAL[name], ev.get("timestamp")
        elif name == "next.evaluated":
            for fired in payload.get("fired") or []:
                if isinstance(fired, dict) and isinstance(fired.get("arc"), int):
                    t.arcs[(str(ev.get("entity_id")), fired["arc"])] += 1
        elif name == "task.done" and rid in t.runs:
            t.tasks[(t.runs[rid].step, str(ev.get("entity_id")))] += 1
    return t


@dataclass
class Coverage:
    arcs: list[tuple[str, int, str]]  # every arc: (step, index, target)
    tasks: list[tuple[str, str]]  # every task: (step, label)
    hit_arcs: set[tuple[str, int]]
    hit_tasks: set[tuple[str, str]]

    @property
    def missed_arcs(self) -> list[tuple[str, int, str]]:
        return [a for a in self.arcs if (a[0], a[1]) not in self.hit_arcs]

    @property
    def missed_tasks(self) -> list[tuple[str, str]]:
        return [t for t in self.tasks if t not in self.hit_tasks]

    def to_dict(self) -> dict[str, Any]:
        return {
            "arcs": {
                "total": len(self.arcs),
                "exercised": len(self.arcs) - len(self.missed_arcs),
                "never": [{"step": s, "arc": k, "to": to} for s, k, to in self.missed_arcs],
            },
            "tasks": {
                "total": len(self.tasks),
                "exercised": len(self.tasks) - len(self.missed_tasks),
                "never": [{"step": s, "task": label} for s, label in self.missed_tasks],
            },
        }


def coverage(playbook: Playbook, traces: list[Trace]) -> Coverage:
    arcs = [
        (s.name, k, a.step) for s in playbook.workflow for k, a in enumerate(s.next.arcs if s.next else ())
    ]
    tasks = [(s.name, t.name) for s in playbook.workflow for t in s.tool]
    hit_arcs = {key for t in traces for key in t.arcs}
    hit_tasks = {key for t in traces for key in t.tasks}
    return Coverage(arcs, tasks, hit_arcs, hit_tasks)
