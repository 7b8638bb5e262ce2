"""Replaying a recorded execution through the engine and diffing the decisions.

The engine is a pure function of its inputs (SEMANTICS §10), so folding a recorded execution's
input events again must give back exactly the server events that were recorded: each regenerated
event carries the id of the input that caused it (``cause_id``), and recorded and regenerated
events are compared per cause, as (name, entity, run, payload) with times left out. With a new
playbook version, the request event's playbook text is swapped before folding: the first cause
whose decisions differ is where the new version would have steered the execution elsewhere.
After that point the recorded worker events belong to the old path, so later differences may
only follow from the first.
"""

from __future__ import annotations

import copy
import difflib
import json
from dataclasses import dataclass, field
from typing import Any

from noetl.engine import is_input, replay
from noetl.events.envelope import Event

_TIMES = frozenset({"timestamp", "started_at", "finished_at", "duration_ms"})


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in _TIMES}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _key(ev: Event) -> str:
    return json.dumps(
        [
            ev.get("name"),
            ev.get("entity_id"),
            ev.get("step_run_id"),
            ev.get("status"),
            _strip(ev.get("payload")),
        ],
        sort_keys=True,
        default=str,
    )


@dataclass
class Diff:
    kind: str  # changed | recorded_only | replayed_only
    recorded: Event | None = None
    replayed: Event | None = None

    def describe(self) -> str:
        if self.kind == "changed":
            return f"recorded {_show(self.recorded)}; replayed {_show(self.replayed)}"
        if self.kind == "recorded_only":
            return f"recorded {_show(self.recorded)}; the replay does not emit it"
        return f"replayed {_show(self.replayed)}; the recording has no such event"


@dataclass
class Divergence:
    index: int  # the position of the cause among the execution's inputs (1-based)
    cause: Event
    diffs: list[Diff] = field(default_factory=list)

    def describe(self) -> str:
        c = self.cause
        step = f" of step `{c.get('entity_id')}`" if c.get("entity_type") in ("step", "loop") else ""
        run = f" (run {c.get('step_run_id')})" if c.get("step_run_id") else ""
        return f"input #{self.index}: {c.get('name')}{step}{run}, event {c.get('event_id')}"


@dataclass
class ReplayReport:
    execution_id: str
    inputs: int
    recorded: int
    replayed: int
    divergences: list[Divergence] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "execution_id": self.execution_id,
            "inputs": self.inputs,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "divergences": [
                {
                    "input": d.index,
                    "cause_id": d.cause.get("event_id"),
                    "cause": d.cause.get("name"),
                    "entity_id": d.cause.get("entity_id"),
                    "diffs": [
                        {"kind": x.kind, "recorded": x.recorded, "replayed": x.replayed} for x in d.diffs
                    ],
                }
                for d in self.divergences
            ],
        }


def _show(ev: Event | None) -> str:
    if ev is None:
        return "nothing"
    name, entity, payload = ev.get("name"), ev.get("entity_id"), ev.get("payload") or {}
    if name == "next.evaluated":
        fired = ", ".join(f"`{f.get('step')}` (arc {f.get('arc')})" for f in payload.get("fired") or [])
        return f"next.evaluated of `{entity}` firing {fired or 'no arc'}"
    if name in ("step.scheduled", "step.skipped"):
        args = json.dumps(payload.get("args"), default=str)
        return f"{name} `{entity}` (run {ev.get('step_run_id')}, args {args})"
    if name == "workflow.finished":
        result = json.dumps(payload.get("result"), default=str)[:80]
        return f"workflow.finished {payload.get('status')} (result {result})"
    return f"{name} `{entity}`"


def _swap_playbook(events: list[Event], text: str) -> list[Event]:
    out = []
    for ev in events:
        if ev.get("name") == "playbook.execution.requested":
            ev = copy.deepcopy(ev)
            ev["payload"]["playbook"] = text
        out.append(ev)
    return out


def replay_diff(events: list[Event], playbook_text: str | None = None) -> ReplayReport:
    """Fold ``events`` through the engine (with ``playbook_text`` instead of the recorded playbook
    when given) and compare the decisions with the recorded server events."""
    source = _swap_playbook(events, playbook_text) if playbook_text is not None else events
    _, decisions = replay(source)
    replayed: dict[str, list[Event]] = {}
    for d in decisions:
        for ev in d.events:
            replayed.setdefault(str(ev.get("cause_id")), []).append(ev)
    recorded: dict[str, list[Event]] = {}
    for ev in events:
        if (
            ev.get("source") == "server"
            and ev.get("cause_id")
            and ev.get("name") != "playbook.execution.requested"
        ):
            recorded.setdefault(str(ev.get("cause_id")), []).append(ev)
    inputs = [ev for ev in events if is_input(ev) or str(ev.get("event_id")) in recorded]
    report = ReplayReport(
        execution_id=str(events[0].get("execution_id")) if events else "",
        inputs=len(inputs),
        recorded=sum(len(v) for v in recorded.values()),
        replayed=sum(len(v) for v in replayed.values()),
    )
    for n, cause in enumerate(inputs, start=1):
        cid = str(cause.get("event_id"))
        old, new = recorded.get(cid, []), replayed.get(cid, [])
        diffs: list[Diff] = []
        matcher = difflib.SequenceMatcher(a=[_key(e) for e in old], b=[_key(e) for e in new], autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                continue
            pairs = list(zip(old[i1:i2], new[j1:j2], strict=False))
            diffs += [Diff("changed", a, b) for a, b in pairs]
            diffs += [Diff("recorded_only", a) for a in old[i1 + len(pairs) : i2]]
            diffs += [Diff("replayed_only", replayed=b) for b in new[j1 + len(pairs) : j2]]
        if diffs:
            report.divergences.append(Divergence(n, cause, diffs))
    return report


def render(report: ReplayReport, against: str) -> str:
    lines = [
        f"replay of execution {report.execution_id} against {against}: {report.inputs} inputs, "
        f"{report.recorded} recorded decisions, {report.replayed} replayed"
    ]
    if not report.divergences:
        lines.append("no divergence: the engine makes every recorded decision again")
        return "\n".join(lines)
    for n, d in enumerate(report.divergences, start=1):
        lines.append(f"divergence {n} at {d.describe()}")
        lines += [f"  {x.describe()}" for x in d.diffs]
    lines.append(
        f"{len(report.divergences)} input{'s diverge' if len(report.divergences) > 1 else ' diverges'}; "
        "the first is where the decisions part ways, "
        "later ones may only follow from it"
    )
    return "\n".join(lines)
