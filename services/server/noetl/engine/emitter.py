"""What one input produces: the events, commands and objects of a decision, with ids derived
from the input's id so that deciding it again yields the same bytes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from noetl.dsl.specmerge import effective_step_spec
from noetl.engine.limits import MAX_EVENT_PAYLOAD
from noetl.engine.state import EventView, ExecutionState, RunState
from noetl.events.envelope import Command, EntityType, Event, EventName, Status, dumps, make_event
from noetl.events.ids import derive_id
from noetl.events.refs import make_reference
from noetl.events.subjects import DEFAULT_POOL


@dataclass
class Decision:
    events: list[Event] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    # (key, bytes) to store in the results object store before the events that refer to them
    objects: list[tuple[str, bytes]] = field(default_factory=list)
    # step runs of loops that ended: no iteration of theirs runs again, so their snapshots can go
    ended_loops: list[str] = field(default_factory=list)
    # timers to arm ({timer_id, execution_id, partition, kind, at, step_run_id}) and to disarm
    # (ids): the adapter keeps them in JetStream, which delivers timer.fired at the due time
    timers: list[dict[str, Any]] = field(default_factory=list)
    cancel_timers: list[str] = field(default_factory=list)


SUMMARY_TEXT = 2048  # characters of a long string (an error message) kept in a summary


def summary(payload: dict[str, Any]) -> dict[str, Any]:
    """What stays inline when a payload leaves by reference: its small fields (``status``, an
    error's ``kind`` and the start of its message, indexes, names), so every reader that shows an
    execution's state (API, CLI, console, metrics, a parent waiting for its child) sees how it
    ended without the object store; the whole payload is one read away (``payload_ref``)."""
    out: dict[str, Any] = {}
    for k, v in payload.items():
        if v is None or isinstance(v, (bool, int, float)):
            out[k] = v
        elif isinstance(v, str):
            out[k] = v if len(v) <= SUMMARY_TEXT else v[:SUMMARY_TEXT] + " …(truncated)"
        elif k == "error" and isinstance(v, dict):
            out[k] = summary(v)
    return out


class Emitter:
    """Builds the outputs of one input event with ids derived from it."""

    def __init__(self, state: ExecutionState, cause: Event) -> None:
        self.state = state
        self.cause_id = cause["event_id"]
        self.ts = cause.get("timestamp", "")
        self.n = 0
        self.out = Decision()

    def event(
        self,
        name: EventName,
        entity_type: EntityType,
        entity_id: str,
        status: Status,
        payload: dict[str, Any] | None = None,
        run: RunState | None = None,
    ) -> Event:
        self.n += 1
        # encoded once: the same bytes count towards max_event_bytes and, when large, are stored
        data = dumps(payload) if payload else b""
        self.state.event_bytes += len(data)
        if len(data) > MAX_EVENT_PAYLOAD:
            key = f"{self.state.execution_id}/events/{derive_id(self.cause_id, self.n)}"
            self.out.objects.append((key, data))
            payload = {**summary(payload or {}), "payload_ref": make_reference(key, data)}
        ev = make_event(
            event_id=derive_id(self.cause_id, self.n),
            execution_id=self.state.execution_id,
            timestamp=self.ts,
            source="server",
            name=name,
            entity_type=entity_type,
            entity_id=entity_id,
            status=status,
            payload=payload,
            step_run_id=run.run_id if run else None,
            parent_execution_id=self.state.parent_execution_id,
            trace_id=self.state.trace_id,
            cause_id=self.cause_id,
        )
        self.out.events.append(ev)
        return ev

    def command(
        self,
        run: RunState,
        *,
        index: int | None = None,
        iter_: dict[str, object] | None = None,
        local: dict[str, object] | None = None,
    ) -> None:
        """``local``: the whole loop for one worker (``exec: local``, SEMANTICS §21)."""
        self.n += 1
        st = self.state
        step = st.playbook.step(run.step)
        pool = str(effective_step_spec(st.playbook, step).get("pool") or DEFAULT_POOL)
        cmd: Command = {
            "command_id": derive_id(self.cause_id, self.n, "command"),
            "execution_id": st.execution_id,
            "pool": pool,
            "step": run.step,
            "step_run_id": run.run_id,
            "index": index,
            "iter": iter_,
            "args": run.args,
            "ctx": st.ctx,
            "workload": st.workload,
            "playbook_digest": st.playbook.digest,
            "partition": st.partition,
            "parent_execution_id": st.parent_execution_id,
            "trace_id": st.trace_id,
            "timestamp": self.ts,
            "schema_version": 1,
        }
        if local is not None:
            cmd["local"] = local
        self.out.commands.append(cmd)


def event_view(name: str, status: str, payload: dict[str, Any]) -> EventView:
    """What arcs and admission see as ``event``."""
    return {
        "name": name,
        "status": status,
        "result": payload.get("result"),
        "error": payload.get("error"),
        "payload": payload,
    }
