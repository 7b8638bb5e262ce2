"""The wire's vocabulary: every event name, and the values an event's ``source``,
``entity_type`` and ``status`` take (docs/nats-contract.md, "Events").

Names are spelled once, here, as ``Literal`` types: code that holds an ``Event`` (or passes a
name to ``make_event``) compares and builds names that mypy checks against ``EventName``, so a
misspelt ``"step.dnoe"`` is a type error instead of a branch that never runs. At run time these
are plain strings: events stay plain dicts on the hot path. The groups the engine and the
readers switch on (the engine's inputs, the worker's terminal events) live here too, so a new
input is declared in one place.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Source = Literal["server", "worker"]
EntityType = Literal["playbook", "workflow", "step", "task", "loop", "next"]
Status = Literal["in_progress", "success", "error", "skipped"]

EventName = Literal[
    # server events
    "playbook.execution.requested",
    "playbook.request.evaluated",
    "workflow.started",
    "step.scheduled",
    "step.skipped",
    "step.waiting",
    "loop.started",
    "loop.items.read",
    "loop.done",
    "next.evaluated",
    "execution.cancel.requested",
    "timer.fired",
    "step.cancelled",
    "signal.received",
    "signal.taken",
    "execution.pause.requested",
    "execution.resume.requested",
    "execution.paused",
    "execution.resumed",
    "execution.abort.requested",
    "execution.forked",
    "workflow.finished",
    "playbook.processed",
    # worker events (step.done and step.failed are written by both)
    "step.started",
    "task.started",
    "task.done",
    "step.done",
    "step.failed",
    "loop.iteration.started",
    "loop.iteration.done",
    "loop.iteration.failed",
    "loop.local.stopped",
    # a stored message holding many events (noetl.events.batches): readers see the events it holds
    "events.batched",
]

EVENT_NAMES: Final[frozenset[str]] = frozenset(get_args(EventName))

EXECUTION_REQUESTED: Final = "playbook.execution.requested"
REQUEST_EVALUATED: Final = "playbook.request.evaluated"
WORKFLOW_STARTED: Final = "workflow.started"
STEP_SCHEDULED: Final = "step.scheduled"
STEP_SKIPPED: Final = "step.skipped"
STEP_WAITING: Final = "step.waiting"
STEP_STARTED: Final = "step.started"
STEP_DONE: Final = "step.done"
STEP_FAILED: Final = "step.failed"
STEP_CANCELLED: Final = "step.cancelled"
LOOP_STARTED: Final = "loop.started"
LOOP_ITEMS_READ: Final = "loop.items.read"
LOOP_DONE: Final = "loop.done"
ITERATION_STARTED: Final = "loop.iteration.started"
ITERATION_DONE: Final = "loop.iteration.done"
ITERATION_FAILED: Final = "loop.iteration.failed"
LOCAL_LOOP_STOPPED: Final = "loop.local.stopped"
EVENTS_BATCHED: Final = "events.batched"
NEXT_EVALUATED: Final = "next.evaluated"
TASK_STARTED: Final = "task.started"
TASK_DONE: Final = "task.done"
CANCEL_REQUESTED: Final = "execution.cancel.requested"
TIMER_FIRED: Final = "timer.fired"
SIGNAL_RECEIVED: Final = "signal.received"
SIGNAL_TAKEN: Final = "signal.taken"
PAUSE_REQUESTED: Final = "execution.pause.requested"
RESUME_REQUESTED: Final = "execution.resume.requested"
PAUSED: Final = "execution.paused"
RESUMED: Final = "execution.resumed"
ABORT_REQUESTED: Final = "execution.abort.requested"
FORKED: Final = "execution.forked"
WORKFLOW_FINISHED: Final = "workflow.finished"
PLAYBOOK_PROCESSED: Final = "playbook.processed"

# A worker's answer to a command: an engine input only with ``source: worker`` (the server
# writes step.done / step.failed of its own, which are outputs).
WORKER_TERMINAL_EVENTS: Final[tuple[EventName, ...]] = (
    STEP_DONE,
    STEP_FAILED,
    ITERATION_DONE,
    ITERATION_FAILED,
    LOCAL_LOOP_STOPPED,  # an exec: local loop's worker started no more iterations (SEMANTICS §21)
)

# Inputs whoever writes them (the server's adapters do): requests, cancels, and time and the
# outside world (SEMANTICS §16, §17).
OUTSIDE_INPUTS: Final[tuple[EventName, ...]] = (
    EXECUTION_REQUESTED,
    CANCEL_REQUESTED,
    TIMER_FIRED,
    SIGNAL_RECEIVED,
    PAUSE_REQUESTED,
    RESUME_REQUESTED,
    # the server could not store a decision of the execution (JetStream refuses it for good): the
    # execution ends through the engine, so a rebuild from the log knows it ended
    ABORT_REQUESTED,
    # a loop.in that is a result reference: the engine writes it with its decision and decides it
    # when it comes back, with the items the adapter read from the object store (SEMANTICS §11)
    LOOP_ITEMS_READ,
)

# The events the server decides on. Everything else in the log (step.started, task.*, and the
# server's own decisions) is there for people and tools, not as input to the engine.
SERVER_INPUT_EVENTS: Final[tuple[EventName, ...]] = (
    EXECUTION_REQUESTED,
    *WORKER_TERMINAL_EVENTS,
    *OUTSIDE_INPUTS[1:],
)
