"""``fold(events) -> state``: rebuild an execution from its event log.

The engine's inputs are replayed through ``decide`` in log order; its recorded outputs are not
needed to rebuild the state (they are what ``decide`` produces again), which is also what makes
``replay`` checks possible: ``replay`` compares the regenerated outputs with the recorded ones.
"""

from __future__ import annotations

from collections.abc import Iterable

from noetl.engine.decide import Decision, decide, is_input, new_state
from noetl.engine.state import ExecutionState
from noetl.events.envelope import Event


def fold(events: Iterable[Event]) -> ExecutionState | None:
    state, _ = replay(events)
    return state


def replay(events: Iterable[Event]) -> tuple[ExecutionState | None, list[Decision]]:
    state: ExecutionState | None = None
    decisions: list[Decision] = []
    for ev in events:
        if not is_input(ev):
            continue
        if ev["name"] == "playbook.execution.requested":
            if state is not None:
                continue  # a duplicate request event: already folded
            state = new_state(ev)
        if state is None:
            continue
        decisions.append(decide(state, ev))
    return state, decisions
