"""What the engine knows about one execution: nothing the event log cannot give back.

``fold`` rebuilds this from the log; the server keeps it in memory only as a cache. Per loop it
keeps counters, the elements not yet dispatched and one result slot per element (a reference when
the result is large), never the iterations' events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypedDict

from noetl.dsl.model import Playbook


class EventView(TypedDict):
    """What admission, arcs and a loop's ``in`` see as ``event``: the end of the step run that
    routed the token here (``emitter.event_view``), kept on the run it started."""

    name: str
    status: str
    result: object
    error: object
    payload: dict[str, Any]


@dataclass
class LoopState:
    # the elements not yet dispatched: an element is dropped once its iteration is sent (a
    # million-element loop would otherwise hold every element and every result at once)
    items: list[Any]
    total: int
    next_index: int = 0
    in_flight: int = 0
    done: int = 0
    failed: int = 0
    stopped: bool = False  # fail_fast tripped: no new iterations
    first_error: dict[str, Any] | None = None
    results: list[Any] = field(default_factory=list)
    # per index, 1 once its terminal event is folded: a byte each, not a list slot of 8
    finished: bytearray = field(default_factory=bytearray)


@dataclass
class RunState:
    """One token's run of a step (a step reached by N tokens runs N times)."""

    run_id: str
    step: str
    seq: int  # arrival order within the execution
    args: dict[str, Any]
    status: str = "running"  # running | done | failed | skipped | waiting (a signal) | held (paused)
    result: Any = None
    error: dict[str, Any] | None = None
    loop: LoopState | None = None
    # loop.in evaluated to a result reference: the run waits for loop.items.read (SEMANTICS §11)
    items_ref: dict[str, Any] | None = None
    # a waiting or held run starts later: the event whose arc brought its token (loop.in sees it)
    trigger: EventView | None = None
    timers: list[str] = field(default_factory=list)  # ids of its armed timers (SEMANTICS §16)


@dataclass
class ExecutionState:
    execution_id: str
    playbook: Playbook
    workload: dict[str, Any]
    ctx: dict[str, Any] = field(default_factory=dict)
    parent_execution_id: str | None = None
    parent_iter: dict[str, Any] | None = None  # the calling iteration's iter (SEMANTICS §19)
    trace_id: str | None = None
    partition: int = 0
    runs: dict[str, RunState] = field(default_factory=dict)
    run_counter: int = 0
    pending: int = 0  # runs admitted and not yet terminal
    failed: bool = False  # an unhandled failure happened (a cancel counts as one)
    cancelled: bool = False
    error: dict[str, Any] | None = None
    finished: bool = False
    status: str = "running"  # running | success | failed
    result: Any = None  # result of the last leaf run (SEMANTICS §13)
    folded_inputs: int = 0
    event_bytes: int = 0  # payload bytes of the inputs folded and the events written (limits)
    # time and the outside world (SEMANTICS §16, §17)
    started_at: str | None = None  # timestamp of workflow.started: deadlines count from it
    paused: bool = False
    held: list[str] = field(default_factory=list)  # runs admitted while paused, in arrival order
    signals: dict[str, list[Any]] = field(default_factory=dict)  # queued signal data by name
    signals_taken: int = 0  # signals a waiting run took, in all: signal.taken carries the count
