"""Slow lanes: executions whose decisions take long are decided off the partition loop.

A partition's inputs are decided one after another on the server's event loop. A playbook whose
templates are heavy (each render is bounded by its work budget, but a decision may still take
~0.5 s) would hold every other execution of the partition, and with them the whole process. Once
one of an execution's decisions took longer than ``SLOW_DECISION_S``, its later inputs go to a
lane of its own: a queue decided in a thread, in order, while the partition loop goes on with the
others. An execution's own order is kept (one lane, one input at a time); the order between
executions never mattered.

The partition's checkpoint stays before the first input a lane has not stored yet (``floor``):
after a crash the server decides from there again, and the decisions it recomputes carry the
ids they had, so JetStream drops the copies.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from noetl.dsl.model import Playbook
from noetl.engine import ExecutionState
from noetl.events.envelope import Event
from noetl.events.runtime import cancel_and_wait

log = logging.getLogger("noetl.server")

# a decision slower than this (the engine's own work, no I/O) sends its execution to a lane
SLOW_DECISION_S = 0.02

Decide = Callable[[ExecutionState, Event], Any]
Store = Callable[[int, Event, Any], Awaitable[None]]
T = TypeVar("T")

# One thread decides the partitions' batches, one the lanes. The engine is pure Python: more
# threads would not decide faster under one interpreter lock, but each would compete with the
# event loop for it, and with six renders running the loop waited 0.1 s at a time (measured).
_BATCHES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noetl-decide")
_LANES = ThreadPoolExecutor(max_workers=1, thread_name_prefix="noetl-lane")


# Filters whose work is at most a pass over one value (itself at most 1 MiB): a template made of
# lookups, comparisons and these renders in about a millisecond, whatever its data.
_SHORT_FILTERS = frozenset({
    "abs", "bool", "capitalize", "count", "d", "default", "e", "escape", "first", "float", "int",
    "last", "length", "lower", "round", "string", "title", "tojson", "trim", "upper",
})
_LONG_NODES = ("Call", "For", "Macro", "CallBlock", "FilterBlock", "Pow", "Mul", "Mod", "FloorDiv")
_EXPRESSION = re.compile(r"\{\{(.*?)\}\}", re.S)
_long: dict[str, bool] = {}


def may_render_long(playbook: Playbook) -> bool:
    """Whether a render of this playbook's templates may take long: a statement block, a call
    (``range``, a method), a big-number or repetition operator, or a filter that sorts, joins or
    maps. Such an execution is decided off the event loop from its first input; any other is
    decided on it, where a decision costs no thread hop (about 0.5 ms a step on the chain,
    measured), and still gets a lane if one of its decisions proves slow after all. Read from
    the playbook's text once per digest; a template that does not parse counts as long."""
    known = _long.get(playbook.digest)
    if known is None:
        known = _long[playbook.digest] = _scan(playbook.source)
        if len(_long) > 4096:
            _long.clear()
    return known


def _scan(source: str) -> bool:
    if "{%" in source:
        return True
    if "{{" not in source:
        return False
    import jinja2
    from jinja2 import nodes

    env = jinja2.Environment()
    for match in _EXPRESSION.finditer(source):
        try:
            tree = env.parse("{{" + match.group(1) + "}}")
        except jinja2.TemplateError:
            return True
        for node in tree.find_all(nodes.Node):
            kind = type(node).__name__
            if kind in _LONG_NODES or (isinstance(node, nodes.Filter) and node.name not in _SHORT_FILTERS):
                return True
    return False


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the thread that decides batches: the event loop (requests, the API, the
    other partitions' reading and storing) goes on while a template renders."""
    return await asyncio.get_running_loop().run_in_executor(_BATCHES, fn, *args)


class _Lane:
    __slots__ = ("partition", "pending", "queue", "ready", "state", "task")

    def __init__(self, partition: int, state: ExecutionState) -> None:
        self.partition = partition
        self.state = state
        self.queue: asyncio.Queue[Event] = asyncio.Queue()
        self.pending: collections.deque[int] = collections.deque()  # stream sequences not stored yet
        self.task: asyncio.Task[None] | None = None
        # opened by the batch that found the execution slow: its outputs go first (``release``)
        self.ready = asyncio.Event()


class SlowLanes:
    """``decide`` runs in a thread (it is pure); ``store`` publishes a decision's outputs."""

    def __init__(self, decide: Decide, store: Store) -> None:
        self._decide = decide
        self._store = store
        self._lanes: dict[str, _Lane] = {}
        self.opened = 0  # lanes opened since start (metrics and tests)

    def __contains__(self, execution_id: object) -> bool:
        return execution_id in self._lanes

    def open(self, execution_id: str, partition: int, state: ExecutionState) -> None:
        if execution_id in self._lanes or state.finished:
            return
        lane = _Lane(partition, state)
        lane.task = asyncio.create_task(self._run(execution_id, lane), name=f"noetl-lane-{execution_id}")
        self._lanes[execution_id] = lane
        self.opened += 1
        log.info(
            "execution %s: its decisions are slow (heavy templates); deciding them off the partition loop",
            execution_id,
        )

    def release(self) -> None:
        """The batch that opened lanes has stored its outputs: their later inputs may follow."""
        for lane in self._lanes.values():
            lane.ready.set()

    def put(self, execution_id: str, seq: int, event: Event) -> None:
        lane = self._lanes[execution_id]
        lane.pending.append(seq)
        lane.queue.put_nowait(event)

    def floor(self, partition: int) -> int | None:
        """The first stream sequence of ``partition`` whose decision is not stored yet."""
        firsts = [
            lane.pending[0] for lane in self._lanes.values() if lane.partition == partition and lane.pending
        ]
        return min(firsts) if firsts else None

    async def close_partition(self, partition: int) -> None:
        for eid in [e for e, lane in self._lanes.items() if lane.partition == partition]:
            lane = self._lanes.pop(eid)
            await cancel_and_wait(lane.task)

    async def close_all(self) -> None:
        for partition in {lane.partition for lane in self._lanes.values()}:
            await self.close_partition(partition)

    async def _run(self, execution_id: str, lane: _Lane) -> None:
        try:
            await lane.ready.wait()
            while True:
                event = await lane.queue.get()
                try:
                    decision = await asyncio.get_running_loop().run_in_executor(
                        _LANES, self._decide, lane.state, event
                    )
                    if decision is not None:
                        await self._store(lane.partition, event, decision)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception(
                        "engine failed on event %s (%s); ignored", event.get("event_id"), event.get("name")
                    )
                lane.pending.popleft()
                if lane.state.finished and lane.queue.empty():
                    return
        finally:
            with contextlib.suppress(KeyError):
                if self._lanes[execution_id] is lane:
                    del self._lanes[execution_id]
