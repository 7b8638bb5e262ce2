"""Drive the pure engine by hand: a fake 'worker' answers commands with terminal events."""

from __future__ import annotations

from typing import Any

from noetl.engine import Decision, ExecutionState, decide, new_state
from noetl.events.envelope import Command, Event, EventName, make_event
from noetl.events.ids import derive_id


def requested(
    text: str,
    payload: dict[str, Any] | None = None,
    missing: list[str] | None = None,
    execution_id: str = "e1",
) -> Event:
    return make_event(
        event_id=derive_id("req", execution_id),
        execution_id=execution_id,
        timestamp="t0",
        source="server",
        name="playbook.execution.requested",
        entity_type="playbook",
        entity_id="p",
        status="in_progress",
        payload={"playbook": text, "payload": payload or {}, "keychain_missing": missing or []},
    )


def answer(
    cmd: Command,
    *,
    ok: bool = True,
    result: Any = None,
    error: dict[str, Any] | None = None,
    patches: list[dict[str, Any]] | None = None,
) -> Event:
    index = cmd.get("index")
    name: EventName
    if index is None:
        name = "step.done" if ok else "step.failed"
    else:
        name = "loop.iteration.done" if ok else "loop.iteration.failed"
    payload: dict[str, Any] = {"result": result, "ctx_patches": patches or []}
    if index is not None:
        payload["index"] = index
    if not ok:
        payload["error"] = error or {"kind": "python_error", "message": "boom"}
    return make_event(
        event_id=derive_id(cmd["command_id"], "terminal"),
        execution_id=cmd["execution_id"],
        timestamp="t1",
        source="worker",
        name=name,
        entity_type="step",
        entity_id=cmd["step"],
        status="success" if ok else "error",
        payload=payload,
        step_run_id=cmd["step_run_id"],
    )


class Driver:
    """Keeps the log like the server would: every input followed by its decisions."""

    def __init__(
        self, text: str, payload: dict[str, Any] | None = None, missing: list[str] | None = None
    ) -> None:
        ev = requested(text, payload, missing)
        self.state: ExecutionState = new_state(ev)
        self.log: list[Event] = []
        self.commands: list[Command] = []
        self.feed(ev)

    def feed(self, ev: Event) -> Decision:
        self.log.append(ev)
        d = decide(self.state, ev)
        self.log.extend(d.events)
        self.commands.extend(d.commands)
        return d

    def take(self) -> list[Command]:
        out, self.commands = self.commands, []
        return out

    def names(self) -> list[str]:
        return [e["name"] for e in self.log]

    def run_all(self, fn: Any = None) -> None:
        """Answer every command (fn(cmd) -> kwargs for answer) until none are left."""
        while self.commands:
            for cmd in self.take():
                self.feed(answer(cmd, **(fn(cmd) if fn else {})))
