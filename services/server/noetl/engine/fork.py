"""Forks: where a rerun takes over from a recorded execution (issue 31).

A rerun is a new execution that starts from the original's log rather than from ``start``: the
original's inputs are folded through the engine (the way ``noetl replay`` does) up to the point
where the chosen step runs were reached, and what the engine knew there (ctx, each chosen run's
``args`` and the event whose arc brought its token) becomes the new execution's starting point.
Nothing a worker did is run again before that point: the results are kept because ctx and the
arcs' ``args`` already carry them.

``plan_fork`` is pure (events in, plan out) so the planning is as deterministic as a replay; the
adapter (``noetl.server.rerun``) reads the log, hands the plan to the new execution's request
event, and the engine (``decide`` on ``playbook.execution.requested``) starts the forked runs.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from noetl.dsl.errors import NoetlError
from noetl.engine.decide import decide, is_input, new_state
from noetl.engine.state import EventView, ExecutionState, RunState
from noetl.events.envelope import Event


@dataclass
class _Arrival:
    """What the engine knew when a step run's token arrived: the fork point of a rerun."""

    input_index: int  # 1-based position among the inputs of the decision that made the run
    ctx: dict[str, Any]
    args: dict[str, Any]
    trigger: EventView | None
    ended_at: int | None = None  # input index of the decision that ended it


@dataclass
class ForkPlan:
    """What a rerun keeps, runs again and cannot keep; ``problem`` set means it cannot fork."""

    from_execution_id: str
    runs: list[dict[str, Any]] = field(default_factory=list)  # {step, run_id, args, trigger}
    ctx: dict[str, Any] = field(default_factory=dict)
    kept: list[dict[str, Any]] = field(default_factory=list)  # {step, run_id, status}
    not_kept: list[str] = field(default_factory=list)  # sentences: said before the rerun runs
    problem: str | None = None

    @property
    def steps(self) -> list[str]:
        return [r["step"] for r in self.runs]

    def fork_payload(self) -> dict[str, Any]:
        """The request's ``fork`` field: all the engine needs to start the forked runs."""
        return {
            "from_execution_id": self.from_execution_id,
            "ctx": self.ctx,
            "runs": [{k: r[k] for k in ("step", "run_id", "args", "trigger")} for r in self.runs],
            "kept": [f"{k['step']}" for k in self.kept],
            "not_kept": self.not_kept,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "from_execution_id": self.from_execution_id,
            "from_steps": self.steps,
            "kept": self.kept,
            "not_kept": self.not_kept,
            "problem": self.problem,
        }


def _fold_recording(
    events: Sequence[Event], text: str | None
) -> tuple[ExecutionState | None, dict[str, _Arrival], set[str], list[list[tuple[Any, ...]]]]:
    """Fold the inputs, noting per run where its token arrived and ended, which failed runs fired
    an arc (handled), and per input the shape of its decision (for comparing two playbooks)."""
    state: ExecutionState | None = None
    arrivals: dict[str, _Arrival] = {}
    handled: set[str] = set()
    shapes: list[list[tuple[Any, ...]]] = []
    seen = 0
    n = 0
    for ev in events:
        if not is_input(ev):
            continue
        if ev["name"] == "playbook.execution.requested":
            if state is not None:
                continue
            if text is not None:
                ev = cast(Event, {**ev, "payload": {**(ev.get("payload") or {}), "playbook": text}})
            state = new_state(ev)
        if state is None:
            continue
        n += 1
        d = decide(state, ev)
        shapes.append([_shape(e) for e in d.events])
        for out in d.events:
            if out["name"] == "next.evaluated" and (out.get("payload") or {}).get("fired"):
                handled.add(str(out.get("step_run_id")))
        for run in state.runs.values():
            if run.seq > seen:
                arrivals[run.run_id] = _Arrival(
                    n, copy.deepcopy(state.ctx), copy.deepcopy(run.args), copy.deepcopy(run.trigger)
                )
            a = arrivals.get(run.run_id)
            if a is not None and a.ended_at is None and run.status in ("done", "failed", "skipped"):
                a.ended_at = n
        seen = state.run_counter
    return state, arrivals, handled, shapes


_ROUTING = ("next.evaluated", "step.scheduled", "step.skipped", "step.waiting")


def _shape(ev: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a decision is compared by: the event, its step and run, and for routing events what
    they carry (the arcs fired, a run's args), as ``noetl replay`` compares them, times left out."""
    payload = ev.get("payload") if ev.get("name") in _ROUTING else None
    return (
        ev["name"],
        ev.get("entity_id"),
        ev.get("step_run_id"),
        json.dumps(payload, sort_keys=True, default=str),
    )


def plan_fork(
    events: Sequence[Event], from_step: str | None = None, playbook_text: str | None = None
) -> ForkPlan:
    """Where a rerun of the execution logged in ``events`` starts, and what it keeps.

    ``from_step``: the last run of that step (None: every failed run whose failure fired no arc).
    ``playbook_text``: the new version the rerun runs; the fold up to the fork point is also done
    with it, and where it decides differently from the recording is said (replay semantics).
    """
    eid = str(next((e.get("execution_id") for e in events), "") or "")
    plan = ForkPlan(eid)
    if not any(e.get("name") == "playbook.execution.requested" for e in events):
        plan.problem = (
            f"execution {eid} has no recorded request in the event stream (rejected, or its events have "
            "left the stream): start a new execution instead"
        )
        return plan
    try:
        state, arrivals, handled, shapes = _fold_recording(events, None)
    except NoetlError as e:
        plan.problem = f"the recorded execution cannot be folded again ({e.kind}: {e.message})"
        return plan
    assert state is not None
    if not state.finished:
        plan.problem = (
            f"execution {eid} is still running: wait for it to end, or cancel it "
            f"(noetl cancel {eid}), then rerun it"
        )
        return plan
    runs = sorted(state.runs.values(), key=lambda r: r.seq)
    chosen = _chosen_runs(runs, from_step, handled, eid, state.status)
    if isinstance(chosen, str):
        plan.problem = chosen
        return plan
    if playbook_text is not None:
        problem = _check_new_playbook(events, playbook_text, chosen, arrivals, shapes)
        if problem is not None and problem.startswith("!"):
            plan.problem = problem[1:]
            return plan
        if problem is not None:
            plan.not_kept.append(problem)
    _keep(plan, runs, chosen, arrivals)
    if state.signals:
        plan.not_kept.append(
            "signals queued in the original and never taken are not carried over: "
            + ", ".join(sorted(state.signals))
        )
    return plan


def _chosen_runs(
    runs: list[RunState], from_step: str | None, handled: set[str], eid: str, status: str
) -> list[RunState] | str:
    """The runs the rerun starts again: the last run of ``from_step``, else every failed (or
    unfinished) run whose failure fired no arc; or why there is none."""
    if from_step is not None:
        chosen = [r for r in runs if r.step == from_step][-1:]
        if not chosen:
            ran = ", ".join(dict.fromkeys(r.step for r in runs)) or "none"
            return (
                f"step {from_step!r} did not run in execution {eid} (steps that ran: {ran}): rerun from one "
                "of those, or without --from to rerun the steps that failed"
            )
        return chosen
    chosen = [r for r in runs if r.status in ("failed", "running", "waiting", "held")]
    chosen = [r for r in chosen if r.run_id not in handled]
    if not chosen:
        return (
            f"execution {eid} has no failed step (it ended {status}): say where to continue "
            "from with --from STEP"
        )
    return chosen


def _keep(
    plan: ForkPlan, runs: list[RunState], chosen: list[RunState], arrivals: dict[str, _Arrival]
) -> None:
    """Fill ``plan`` from the fork point (the latest arrival of a chosen run): the ctx there, the
    runs started again, the runs kept (ended before it), and what is not kept, said before it runs."""
    fork_at = max(arrivals[r.run_id].input_index for r in chosen)
    plan.ctx = arrivals[max(chosen, key=lambda r: arrivals[r.run_id].input_index).run_id].ctx
    chosen_ids = {r.run_id for r in chosen}
    for r in chosen:
        a = arrivals[r.run_id]
        plan.runs.append({"step": r.step, "run_id": r.run_id, "args": a.args, "trigger": a.trigger})
        if r.loop is not None and r.loop.done:
            plan.not_kept.append(
                f"loop step `{r.step}` runs again from its first iteration: {r.loop.done} of its "
                f"{r.loop.total} iterations had succeeded"
            )
    for r in runs:
        if r.run_id in chosen_ids:
            continue
        a = arrivals[r.run_id]
        if a.input_index > fork_at:
            continue  # after the fork point: the rerun decides again whether it runs
        if a.ended_at is not None and a.ended_at <= fork_at:
            plan.kept.append({"step": r.step, "run_id": r.run_id, "status": r.status})
        else:
            plan.not_kept.append(
                f"`{r.step}` (run {r.run_id}) was still running when the rerun's starting point was "
                "reached: the rerun does not run it again and its ctx writes after that point are not "
                f"kept; rerun --from {r.step} to run it"
            )


def _check_new_playbook(
    events: Sequence[Event],
    text: str,
    chosen: list[Any],
    arrivals: dict[str, _Arrival],
    shapes: list[list[tuple[Any, ...]]],
) -> str | None:
    """None when the new version makes the recorded decisions up to the fork point; else what
    differs (``!``-prefixed when the rerun cannot run at all)."""
    try:
        state, _, _, new_shapes = _fold_recording(events, text)
    except NoetlError as e:
        return f"!the new playbook is not valid ({e.kind}): {e.message}"
    assert state is not None
    names = {s.name for s in state.playbook.workflow}
    missing = sorted({r.step for r in chosen} - names)
    if missing:
        return (
            f"!the new playbook has no step {', '.join(map(repr, missing))}: rerun from a step it has "
            "(--from STEP), or fix the playbook"
        )
    fork_at = max(arrivals[r.run_id].input_index for r in chosen)
    for i, (old, new) in enumerate(zip(shapes[:fork_at], new_shapes[:fork_at], strict=False), start=1):
        if old != new:
            return (
                f"the new playbook decides differently from the recording at input #{i} "
                f"(recorded {_describe(old)}, now {_describe(new)}): the kept results "
                "follow the old version's routing (noetl replay ID --playbook FILE shows the difference)"
            )
    return None


def _describe(shape: list[tuple[Any, ...]]) -> str:
    return "; ".join(f"{s[0]} `{s[1]}`" + (f" {s[3]}" if s[3] != "null" else "") for s in shape[:3])[:300]
