"""The pure engine: ``fold(events) -> state`` and ``decide(state, event) -> (events, commands)``."""

from noetl.engine.decide import Decision, decide, is_input, new_state
from noetl.engine.fold import fold, replay
from noetl.engine.state import ExecutionState, LoopState, RunState

__all__ = [
    "Decision",
    "ExecutionState",
    "LoopState",
    "RunState",
    "decide",
    "fold",
    "is_input",
    "new_state",
    "replay",
]
