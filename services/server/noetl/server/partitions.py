"""Reading and deciding a partition's inputs: an ordered reader from the checkpoint on, each input
decided by the engine on its execution's state (rebuilt from the log when not in memory), the
batch's decisions stored by ``noetl.server.storing``. Part of ``noetl.server.service.Server``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

from noetl.dsl.errors import DecisionUnstorableError
from noetl.engine import ExecutionState, decide, is_input, new_state
from noetl.engine.fold import replay
from noetl.events import subjects as s
from noetl.events import supervise, vocabulary
from noetl.events.batches import decode_events, events_of
from noetl.events.envelope import Event, WireError
from noetl.events.port import BusError, BusUnavailableError, Message, ReaderLostError
from noetl.events.retry import Backoff, describe, is_transient, retrying
from noetl.server.lanes import SLOW_DECISION_S, may_render_long, off_loop
from noetl.server.parts import BATCH, READER_GRACE, REBUILD_PATIENCE
from noetl.server.storing import DecisionStoring, Outputs

log = logging.getLogger("noetl.server")

_INPUTS = frozenset(vocabulary.SERVER_INPUT_EVENTS)  # what the engine reads of a batch
_TO_LANE: Any = object()  # a decision left to the execution's new lane (``_decide_batch``)


def _decide_batch(
    todo: list[tuple[int, Event, ExecutionState]],
) -> list[tuple[int, Event, ExecutionState, Any, bool]]:
    """The batch's decisions, in order, off the event loop: ``(seq, event, state, decision,
    slow)``. Once an execution's decision proves slow (its thread's CPU time, so waiting for the
    interpreter lock does not count) its later inputs of the batch are not decided here but left
    to the lane it gets (``_TO_LANE``): the partition's other executions need not wait for them."""
    out: list[tuple[int, Event, ExecutionState, Any, bool]] = []
    laned: set[str] = set()
    for seq, event, state in todo:
        eid = event["execution_id"]
        if eid in laned:
            out.append((seq, event, state, _TO_LANE, False))
            continue
        if state.finished:
            continue
        began = time.thread_time()
        try:
            decision = decide(state, event)
        except Exception:
            log.exception("engine failed on event %s (%s); ignored", event.get("event_id"), event.get("name"))
            continue
        slow = time.thread_time() - began > SLOW_DECISION_S
        if slow:
            laned.add(eid)
        out.append((seq, event, state, decision, slow))
    return out


class PartitionReading(DecisionStoring):
    @property
    def owned(self) -> list[int]:
        """The partitions this replica decides for (a loop running or being started again)."""
        return sorted(self._loops)

    def _may_decide(self, partition: int) -> bool:
        return self.leases is None or self.leases.valid(partition)

    async def _checkpoint(self, partition: int) -> int:
        e = await self.kv.get(s.checkpoint_key(partition))
        return int(e.value or b"0") if e is not None else 0

    async def _partition_loop(self, partition: int) -> None:
        """Decide the partition's inputs in stream order, from the checkpoint on, while we own it.

        The reader is an ordered consumer (``_read_from``): whatever breaks it (its node gone, a
        message lost on the way, an election) ends it, and a new one starts after the last input
        decided. It needs no acks: the checkpoint is the acknowledgement. An input delivered twice
        is harmless: the engine ignores an input for a run that already ended.

        The loop ends only when it is cancelled (the lease released, the server stopping). While
        the lease is not known to be valid (a renewal late after a pause or an election) it waits
        instead of ending: the lease round either renews it, and reading goes on where it stopped,
        or releases it, which cancels this loop. A loop that ended at such an instant while the
        lease was then renewed left its partition without a reader for good.
        """
        loop = asyncio.get_running_loop()
        start = await retrying(lambda: self._checkpoint(partition), f"partition {partition}: checkpoint") + 1
        backoff = Backoff(0.1, 2.0, healthy_after=5.0)  # a reader that lasted starts it again
        try:
            while not self._stopping.is_set():
                if not self._may_decide(partition):
                    await asyncio.sleep(0.05)
                    continue
                began = loop.time()
                try:
                    start = await self._read_from(partition, start)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    self.reader_restarts += 1
                    (log.info if is_transient(e) or isinstance(e, BusError) else log.exception)(
                        "partition %d: reader stopped (%s); a new one starts at %d",
                        partition,
                        describe(e),
                        start,
                    )
                    await asyncio.sleep(backoff.next(loop.time() - began))
        finally:
            with contextlib.suppress(Exception):
                await self._checkpoint_to(partition, None, now=True)

    def liveness(self) -> dict[str, Any]:
        """What ``/ready`` and ``/metrics`` say of this replica's deciding: the partitions it owns,
        those without a live reader (a loop gone, or no reader open for ``READER_GRACE`` seconds),
        and how often readers and loops were started again."""
        now = asyncio.get_running_loop().time()
        missing = []
        for p in self.owned:
            task = self._loops.get(p)
            is_open, since = self._reading.get(p, (False, now))
            if task is None or task.done() or (not is_open and now - since > READER_GRACE):
                missing.append(p)
        return {
            "partitions_owned": self.owned,
            "partitions_without_reader": missing,
            "reader_restarts": self.reader_restarts,
            "loop_restarts": dict(supervise.restarts),
        }

    async def _read_from(self, partition: int, start: int) -> int:
        """Read from stream sequence ``start`` until the reader breaks; returns where to go on."""
        self._readers += 1
        name = s.partition_reader_name(partition, self.member, self._readers)
        filters = s.partition_input_filters(partition)
        reader = await retrying(
            lambda: self.bus.reader(s.EVENTS_STREAM, filters, start_seq=start, name=name),
            f"partition {partition}: reader",
        )
        self._mark_reader(partition, True)
        try:
            while not self._stopping.is_set() and self._may_decide(partition):
                try:
                    batch = await reader.fetch(BATCH, 1.0)
                except ReaderLostError as e:
                    log.warning("partition %d: %s; reading again from %d", partition, e, start)
                    self.reader_restarts += 1
                    return start
                if not batch:
                    await self._checkpoint_to(partition, None, now=True)
                    continue
                await self._process_batch(partition, batch)
                start = batch[-1].seq + 1
            return start
        finally:
            self._mark_reader(partition, False)
            with contextlib.suppress(Exception):
                await reader.close()

    def _mark_reader(self, partition: int, is_open: bool) -> None:
        if partition in self._loops:
            self._reading[partition] = (is_open, asyncio.get_running_loop().time())

    async def _process_batch(self, partition: int, batch: list[Message]) -> None:
        """Decide a batch: the states it needs first (I/O, on the event loop), then every decision
        in one thread, in stream order, then store the outputs together.

        The engine renders templates, and a render may take up to its work budget: decided on the
        event loop, the first slow render of each execution stalled every partition, the API and
        the request handler (15 executions of one heavy render each held the server 28 s). A batch
        with a playbook whose templates may render long (``lanes.may_render_long``) is decided in
        a thread, so the loop goes on from the first render; the others stay on the loop, where a
        step costs no thread hop (docs/security.md has the figures). An execution whose decision
        proves slow gets a lane of its own, so it stops holding its partition's others."""
        # outputs by execution: stored together, or one execution at a time for the rare batch
        # JetStream can never store (``_store_each``)
        groups: dict[str, Outputs] = {}
        ended_loops: list[tuple[str, str]] = []
        last_seq = batch[-1].seq if batch else 0
        todo = await self._to_decide(partition, batch)
        if any(may_render_long(state.playbook) for _, _, state in todo):
            decided = await off_loop(_decide_batch, todo)
        else:
            decided = _decide_batch(todo)
        for seq, event, state, decision, slow in decided:
            eid = event["execution_id"]
            if decision is _TO_LANE:
                if eid in self.lanes:  # else it finished: nothing left to decide
                    self.lanes.put(eid, seq, event)
                continue
            if slow:
                self.lanes.open(eid, partition, state)
            if decision is not None:
                self._collect(groups, ended_loops, partition, event, decision)
        # objects before the events that refer to them; events before commands, so a worker's
        # events always follow the step.scheduled they answer (an execution's own order is kept)
        objects = [o for g in groups.values() for o in g.objects]
        events = [e for g in groups.values() for e in g.events]
        commands = [c for g in groups.values() for c in g.commands]
        armed = [t for g in groups.values() for t in g.timers]
        try:
            await self._until_stored(self._store(objects, events, commands, partition, last_seq, armed))
        except DecisionUnstorableError:
            await self._store_each(groups, partition, last_seq)
        self.lanes.release()
        if ended_loops:
            self._purge_snapshots(ended_loops)
        self._disarm(groups)
        self.decided += len(batch)
        self._forget_finished()

    async def _to_decide(
        self, partition: int, batch: list[Message]
    ) -> list[tuple[int, Event, ExecutionState]]:
        """The batch's inputs with the state each is decided on (read or rebuilt here, where I/O
        belongs); an execution that has a lane gets its inputs there instead, in order."""
        todo: list[tuple[int, Event, ExecutionState]] = []
        for msg in batch:
            try:
                events = decode_events(msg.data, _INPUTS)
            except WireError as e:
                (log.error if e.newer else log.warning)("ignored a message on %s: %s", msg.subject, e)
                continue
            for event in events:
                if is_input(event):
                    await self._add_input(todo, partition, msg.seq, event)
        return todo

    async def _add_input(
        self, todo: list[tuple[int, Event, ExecutionState]], partition: int, seq: int, event: Event
    ) -> None:
        if event["name"] == "loop.items.read":  # the value of a loop.in reference: I/O, so here
            event = await retrying(
                functools.partial(self.catalog.with_playbook_text, event),
                "reading loop items",
                also=(BusError,),
            )
        if event.get("execution_id") in self.lanes:
            self.lanes.put(event["execution_id"], seq, event)
            return
        try:
            # NATS failures are waited out inside, so an input is never skipped for want of I/O
            state = await self._state_for(event, seq, partition)
        except Exception:
            log.exception("engine failed on event %s (%s); ignored", event.get("event_id"), event.get("name"))
            return
        if state is not None:
            todo.append((seq, event, state))

    async def _state_for(self, event: Event, seq: int, partition: int) -> ExecutionState | None:
        """The state ``event`` is decided on, read or rebuilt when not in memory; None when there
        is nothing to decide (no execution, a repeated request, one that finished)."""
        eid = event.get("execution_id")
        if not isinstance(eid, str):
            return None
        state = self.states.get(eid)
        if state is None:
            # reads: any NATS failure is waited out, an input is never skipped for want of its state
            if event["name"] == "playbook.execution.requested":
                state = new_state(
                    await retrying(
                        lambda: self.catalog.with_playbook_text(event),
                        "reading a playbook",
                        also=(BusError,),
                    )
                )
            else:
                state = await retrying(
                    lambda: self._rebuild(eid, seq), f"rebuilding {eid}", also=(BusError,)
                )
                if state is None:
                    log.warning("event %s for unknown execution %s ignored", event.get("event_id"), eid)
                    return None
            self.states[eid] = state
            self._state_partition[eid] = partition
        elif event["name"] == "playbook.execution.requested":
            return None  # a repeated request event: already started
        return None if state.finished else state

    @staticmethod
    def _decide_known(state: ExecutionState, event: Event) -> Any:
        """A lane's decision (in a thread): the engine alone, on a state already in memory."""
        if state.finished or event["name"] == "playbook.execution.requested":
            return None
        return decide(state, event)

    async def _rebuild(self, execution_id: str, before_seq: int) -> ExecutionState | None:
        """The execution's state from its inputs before ``before_seq`` (the input being decided).

        Read with an ordered reader until it delivers that input itself: a reader delivers in
        stream order, so reaching it proves every earlier input was read. A read that stops where
        the reader's replica said the stream ended could come from a replica still catching up
        after a partition healed, and a state folded from a truncated history decides again what
        was already decided, under other ids (iterations scheduled twice, seen in the fault
        matrix's partition case)."""
        filters = s.execution_input_filters(execution_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + REBUILD_PATIENCE
        reader = await self.bus.reader(s.EVENTS_STREAM, filters, start_seq=1)
        msgs: list[Message] = []
        try:
            while True:
                batch = await reader.fetch(512, 1.0)
                reached = next((i for i, m in enumerate(batch) if m.seq >= before_seq), None)
                msgs.extend(batch if reached is None else batch[:reached])
                if reached is not None:
                    break
                if loop.time() > deadline:
                    raise BusUnavailableError(
                        f"rebuilding {execution_id}: its input at sequence {before_seq} was not read back "
                        f"within {REBUILD_PATIENCE:g} s (a replica behind the stream); reading again"
                    )
        finally:
            with contextlib.suppress(Exception):
                await reader.close()
        events = [e for m in msgs for e in events_of(m.data, _INPUTS)]
        state, _ = replay([await self.catalog.with_playbook_text(e) for e in events])
        return state
