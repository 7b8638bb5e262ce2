"""The control plane: consumes requests and engine inputs, runs the engine, publishes decisions.

Inputs of one partition are read with an ordered consumer, strictly in stream order, and decided
one after another; the decisions of a batch of inputs are published together and the partition's
checkpoint (the stream sequence of the last input whose outputs are stored) advances only after
their acks. After a restart the server resumes after the checkpoint: an execution it no longer has
in memory is rebuilt by folding its inputs that precede the current one, and the decisions it
recomputes carry the ids they had before, so JetStream drops the ones already stored.

Several replicas split the partitions through leases (``noetl.server.leases``): a replica reads
and decides for a partition only while it holds that partition's lease. Every replica serves
requests (a shared durable consumer), the NATS service and the HTTP API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

import nats.errors

from noetl.dsl.errors import DecisionUnstorableError, DeploymentError
from noetl.engine import ExecutionState, decide, is_input, new_state
from noetl.engine.endings import ending
from noetl.engine.fold import replay
from noetl.events import subjects as s
from noetl.events import supervise, tracing
from noetl.events.clock import utc_now
from noetl.events.envelope import Event, WireError, decode_event, dumps, loads, make_event
from noetl.events.ids import derive_id
from noetl.events.nats_port import as_bus
from noetl.events.port import (
    Bus,
    BusError,
    Delivery,
    Entry,
    KeyExistsError,
    Message,
    QueueConfig,
    ReaderLostError,
    RefusedError,
    UnavailableError,
)
from noetl.events.retry import describe, is_transient, retrying
from noetl.events.runtime import cancel_and_wait, process_id
from noetl.events.streams import replicated
from noetl.server import schedules, timers
from noetl.server.lanes import SLOW_DECISION_S, SlowLanes
from noetl.server.leases import PartitionLeases
from noetl.server.requests import RequestHandler
from noetl.server.traces import trace_decision
from noetl.store.catalog import Catalog

log = logging.getLogger("noetl.server")

BATCH = 256
CHECKPOINT_EVERY = 0.1  # seconds
# events someone waits for (clients follow an execution to its end): acknowledged one by one
_WAITED_FOR = frozenset({"workflow.finished", "playbook.processed"})
_NATS_ERRORS = (nats.errors.Error, BusError)
# a request taken by a replica that then died goes to another one after this many seconds
REQUEST_ACK_WAIT = 10.0
# how long a rebuild waits for its reader to deliver the input being decided before reading again
REBUILD_PATIENCE = 15.0
# an owned partition whose reader is being opened again for longer than this is reported without one
READER_GRACE = 10.0


class Server:
    def __init__(
        self,
        bus: Any,
        *,
        partitions: int | None = None,
        owned: list[int] | None = None,
        credentials: Any = None,
        replicas: int | None = None,
        lease_ttl: float | None = None,
        leases: bool = True,
    ) -> None:
        """``partitions`` None takes the count recorded in JetStream (``DEFAULT_PARTITIONS`` on a new
        deployment). The partitions this server decides for come from the leases; ``owned`` fixes
        them instead, and ``leases=False`` takes them all (a private NATS with one server).
        ``bus``: the bus port (``noetl.events.port``), or a nats-py connection to wrap in one."""
        self.bus: Bus = as_bus(bus, replicas=replicas)
        self._partitions_arg = partitions
        self.partitions = partitions or s.DEFAULT_PARTITIONS
        self._static = owned
        self._all = not leases
        self.replicas = replicas
        self._ack_all = replicated(replicas)  # see Outbox: every event acked on replicated streams
        self.lease_ttl = lease_ttl
        self.member = process_id()
        self.credentials = credentials
        self.states: dict[str, ExecutionState] = {}
        self._state_partition: dict[str, int] = {}
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.decided = 0
        self._unsaved: dict[int, int] = {}  # partition -> stored stream sequence not checkpointed yet
        self._next_save: dict[int, float] = {}
        self._readers = 0  # readers opened, for unique names
        self.reader_restarts = 0  # readers lost and opened again (metrics)
        # owned partition -> (a reader open, since when): what /ready and /metrics report
        self._reading: dict[int, tuple[bool, float]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self.leases: PartitionLeases | None = None
        self.lanes = SlowLanes(self._decide_known, self._store_lane)
        # sees every input the engine decides on and every event it writes (metrics)
        self.observer: Callable[[Event], None] | None = None

    @property
    def owned(self) -> list[int]:
        return sorted(self._loops)

    async def start(self) -> None:
        await retrying(lambda: self.bus.prepare(self.replicas), "declaring streams")
        if self.credentials is None:
            from noetl.store.credentials import CredentialStore

            self.credentials = await retrying(
                lambda: CredentialStore.open(self.bus, None), "opening credentials"
            )
        self.catalog = await retrying(lambda: Catalog.open(self.bus), "opening the catalog")
        self.kv = await retrying(lambda: self.bus.kv(s.SERVER_BUCKET), "opening noetl_server")
        self.iter_kv = await retrying(lambda: self.bus.kv(s.ITER_BUCKET), "opening noetl_iter")
        self.partitions = await retrying(self._settle_partitions, "reading the partition count")
        self.requests = RequestHandler(self.bus, self.catalog, self.credentials, self.partitions)
        self._tasks.append(supervise.start("server request loop", self._request_loop, self._stopping))
        self._tasks.append(
            supervise.start(
                "server timer loop", lambda: timers.due_loop(self.bus, self._stopping), self._stopping
            )
        )
        self._tasks.append(
            supervise.start(
                "server schedule loop",
                lambda: schedules.fire_loop(self.bus, self.requests, self._stopping),
                self._stopping,
            )
        )
        if self._static is not None or self._all:
            for p in self._static if self._static is not None else range(self.partitions):
                await self._start_partition(p)
        else:
            self.leases = PartitionLeases(
                self.bus,
                self.member,
                self.partitions,
                on_acquire=self._start_partition,
                on_release=self._stop_partition,
                on_hold=self._start_partition,
                ttl=self.lease_ttl,
                replicas=self.replicas,
            )
            await self.leases.start()

    async def stop(self) -> None:
        self._stopping.set()
        if self.leases is not None:
            await self.leases.stop()  # every partition handed over: loops stopped, keys deleted
        for p in list(self._loops):
            await self._stop_partition(p)
        await self.lanes.close_all()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        for t in list(self._background):
            await cancel_and_wait(t)

    async def _settle_partitions(self) -> int:
        """The partition count is fixed when the event log is first used: every replica must map an
        execution id to the same partition, and the workers publish to the partition a command
        names. A different ``--partitions`` later is refused rather than splitting the log."""
        entry = await self.kv.get(s.PARTITIONS_KEY)
        recorded = int(entry.value or b"0") if entry is not None else 0
        if not recorded:
            want = self._partitions_arg or s.DEFAULT_PARTITIONS
            try:
                await self.kv.create(s.PARTITIONS_KEY, str(want).encode())
                return want
            except KeyExistsError:
                # another replica recorded it first; our node may not show it for a moment
                deadline = asyncio.get_running_loop().time() + 10
                entry = await retrying(
                    self._recorded, "reading the partition count", also=(LookupError,), deadline=deadline
                )
                recorded = int(entry.value or b"0")
        if self._partitions_arg is not None and self._partitions_arg != recorded:
            raise DeploymentError(
                f"--partitions {self._partitions_arg}: this event log was set up with {recorded} partitions "
                f"(key {s.PARTITIONS_KEY} of KV bucket {s.SERVER_BUCKET}); start every server with "
                f"--partitions {recorded}, or leave --partitions out to use the recorded count"
            )
        return recorded

    async def _recorded(self) -> Entry:
        entry = await self.kv.get(s.PARTITIONS_KEY)
        if entry is None:
            raise LookupError(f"{s.PARTITIONS_KEY} not shown yet")
        return entry

    async def _start_partition(self, partition: int) -> None:
        """Start deciding for ``partition``, or start again a loop that ended: called when a lease is
        acquired and on every round that keeps it, so a partition held is never left without its
        reader whatever ended the loop (it should not end, see ``_partition_loop``)."""
        task = self._loops.get(partition)
        if task is not None and not task.done():
            return
        if task is not None:
            cause = "cancelled" if task.cancelled() else describe(task.exception() or Exception("returned"))
            log.warning("partition %d: its loop had ended (%s); starting it again", partition, cause)
            supervise.restarts[f"partition {partition}"] += 1
            # it starts from the checkpoint again, which may be behind what memory holds
            await self.lanes.close_partition(partition)
            self._forget_partition(partition)
        self._loops[partition] = asyncio.create_task(
            self._partition_loop(partition), name=f"noetl-partition-{partition}"
        )
        self._mark_reader(partition, False)

    async def _stop_partition(self, partition: int) -> None:
        """Stop deciding for ``partition`` and forget its executions: while another replica owns it
        they advance, so what this one holds in memory is stale by the time it owns it again."""
        await cancel_and_wait(self._loops.pop(partition, None))
        self._reading.pop(partition, None)
        await self.lanes.close_partition(partition)
        self._forget_partition(partition)

    def _forget_partition(self, partition: int) -> None:
        for eid in [e for e, p in self._state_partition.items() if p == partition]:
            self.states.pop(eid, None)
            self._state_partition.pop(eid, None)

    def _may_decide(self, partition: int) -> bool:
        return self.leases is None or self.leases.valid(partition)

    # --- requests ------------------------------------------------------------------------

    async def _request_loop(self) -> None:
        config = QueueConfig(
            stream=s.REQUESTS_STREAM,
            consumer="noetl-server-requests",
            filter=s.REQUESTS_FILTER,
            ack_wait=REQUEST_ACK_WAIT,
            max_deliver=5,
        )
        queue = await retrying(lambda: self.bus.queue(config), "request consumer")
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await queue.fetch(64, 1.0)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # connection blips: keep the loop alive
                    log.warning("request fetch failed: %s", e)
                    await asyncio.sleep(0.2)
                    continue
                # requests are independent of each other: handle a batch at once; its cancels,
                # signals, pauses and resumes after them, so one sent right after its request finds
                # the execution recorded, and in the order they came (signals queue in that order)
                others = [m for m in msgs if m.subject != s.REQUEST_SUBJECT]
                await asyncio.gather(*(self._request(m) for m in msgs if m.subject == s.REQUEST_SUBJECT))
                for m in others:
                    await self._request(m)
        finally:
            with contextlib.suppress(Exception):
                await queue.close(nak=True)  # requests delivered and not handled: to the next server now

    async def _request(self, m: Delivery) -> None:
        """Recorded with the same ids until it is stored (through an election, holding the message
        with in-progress acks), then acknowledged; only a failure of its own is nak'ed."""
        msg_id = m.msg_id

        async def attempt() -> Any:
            if m.subject == s.CANCEL_SUBJECT:
                return await self.requests.cancel(m.data)
            if m.subject in (s.SIGNAL_SUBJECT, s.PAUSE_SUBJECT, s.RESUME_SUBJECT):
                return await self.requests.outside(m.subject, m.data, msg_id)
            return await self.requests.handle(m.data, msg_id)

        holding = asyncio.create_task(_hold(m))
        try:
            await retrying(attempt, "recording a request")
        except Exception as failure:
            # not NATS (retried above): the request itself breaks something. Its sender still gets
            # an answer; a request that cannot even be rejected is redelivered, then dropped
            log.exception("request handling failed; rejecting it")
            cause: BaseException = failure
            try:
                await retrying(lambda: self.requests.reject_unrecordable(m.data, msg_id, cause), "rejecting")
            except Exception:
                with contextlib.suppress(Exception):
                    await m.nak(delay=1)
                return
        finally:
            holding.cancel()
        await m.ack()

    # --- engine inputs -------------------------------------------------------------------

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
        delay = 0.1
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
                    delay = 0.1 if loop.time() - began > 5 else min(delay * 2, 2.0)
                    await asyncio.sleep(delay)
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
        # outputs by execution: stored together, or one execution at a time for the rare batch
        # JetStream can never store (``_store_each``)
        groups: dict[str, _Outputs] = {}
        ended_loops: list[tuple[str, str]] = []
        last_seq = 0
        for msg in batch:
            last_seq = msg.seq
            try:
                event = decode_event(msg.data)
            except WireError as e:
                (log.error if e.newer else log.warning)("ignored a message on %s: %s", msg.subject, e)
                continue
            if not is_input(event):
                continue
            if event.get("execution_id") in self.lanes:
                self.lanes.put(event["execution_id"], last_seq, event)
                continue
            try:
                # NATS failures are waited out inside, so an input is never skipped for want of I/O
                decision = await self._decide(event, last_seq, partition)
            except Exception:
                log.exception(
                    "engine failed on event %s (%s); ignored", event.get("event_id"), event.get("name")
                )
                continue
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
        except _Unstorable:
            await self._store_each(groups, partition, last_seq)
        self.lanes.release()
        if ended_loops:
            self._purge_snapshots(ended_loops)
        self._disarm(groups)
        self.decided += len(batch)
        self._forget_finished()

    def _collect(
        self,
        groups: dict[str, _Outputs],
        ended_loops: list[tuple[str, str]],
        partition: int,
        event: Event,
        decision: Any,
    ) -> None:
        if self.observer is not None:
            self._observe(event, decision.events)
        if tracing.enabled():  # spans, and each command's traceparent (off: this check only)
            trace_decision(self.states.get(event["execution_id"]), event, decision)
        group = groups.setdefault(event["execution_id"], _Outputs(event))
        group.cause = event
        group.objects.extend(decision.objects)
        group.timers.extend(decision.timers)
        group.disarm.extend(decision.cancel_timers)
        ended_loops.extend((event["execution_id"], run_id) for run_id in decision.ended_loops)
        for ev in decision.events:
            subject = s.event_subject(partition, ev["execution_id"], ev["name"])
            group.events.append((subject, dumps(ev), ev["event_id"], ev["name"] in _WAITED_FOR))
        for cmd in decision.commands:
            group.commands.append((s.command_subject(cmd["pool"]), dumps(cmd), cmd["command_id"]))

    def _disarm(self, groups: dict[str, _Outputs]) -> None:
        """Timers of runs that ended, and every timer of an execution that finished: purged in the
        background (``timers.disarm``)."""
        for eid, g in groups.items():
            state = self.states.get(eid)
            if state is not None and state.finished and timers.uses_timers(state.playbook):
                self._in_background(timers.disarm(self.bus, eid))
            elif g.disarm:
                self._in_background(timers.disarm(self.bus, eid, g.disarm))

    def _forget_finished(self) -> None:
        for eid in [e for e, st in self.states.items() if st.finished]:
            st = self.states.pop(eid)
            self._state_partition.pop(eid, None)
            log.info(
                "execution finished",
                extra={"execution_id": eid, "status": st.status, "playbook": st.playbook.metadata.path},
            )

    async def _store_lane(self, partition: int, event: Event, decision: Any) -> None:
        """One decision of a slow lane (``noetl.server.lanes``), stored as a batch's are; the
        partition's checkpoint is not moved here: it follows the lanes' floor."""
        groups: dict[str, _Outputs] = {}
        ended_loops: list[tuple[str, str]] = []
        self._collect(groups, ended_loops, partition, event, decision)
        g = groups[event["execution_id"]]
        try:
            await self._until_stored(self._store(g.objects, g.events, g.commands, partition, None, g.timers))
        except _Unstorable:
            await self._store_each(groups, partition, None)
        if ended_loops:
            self._purge_snapshots(ended_loops)
        self._disarm(groups)
        self.decided += 1
        self._forget_finished()

    async def _store_each(self, groups: dict[str, _Outputs], partition: int, seq: int | None) -> None:
        """JetStream refused something of the batch for good (a message over the server's
        ``max_payload``, a subject it cannot take): store each execution's outputs alone, and end
        the one whose outputs can never be stored with ``decision_unstorable`` instead of retrying
        it forever and stalling every execution of the partition behind it.

        The end goes through the engine: an ``execution.abort.requested`` input on the partition,
        decided like any other, so the log says why the execution ended and a rebuild from it
        knows it did. Only if that decision cannot be stored either are the closing events
        written here directly."""
        for eid, g in groups.items():
            try:
                await self._until_stored(
                    self._store(g.objects, g.events, g.commands, partition, None, g.timers)
                )
                continue
            except _Unstorable as e:
                cause = e.__cause__ or e
            err = DecisionUnstorableError(
                f"the server's decision on {g.cause.get('name')} could not be stored in JetStream "
                f"({type(cause).__name__}: {str(cause)[:200]}); the execution ends here. A message over "
                "the NATS server's max_payload? Keep large values in results (by reference)"
            ).to_dict()
            log.error("execution %s: %s", eid, err["message"])
            if g.cause.get("name") == "execution.abort.requested":
                await self._close_directly(eid, g.cause, err, partition)
                continue
            abort = make_event(
                event_id=derive_id(g.cause["event_id"], "unstorable"),
                execution_id=eid,
                timestamp=g.cause.get("timestamp") or utc_now(),
                source="server",
                name="execution.abort.requested",
                entity_type="workflow",
                entity_id=eid,
                status="error",
                payload={"error": err},
                cause_id=g.cause["event_id"],
            )
            subject = s.event_subject(partition, eid, "execution.abort.requested")
            stored = [(subject, dumps(abort), abort["event_id"], True)]
            await self._until_stored(self._store([], stored, [], partition, None))
        await self._checkpoint_to(partition, seq)

    async def _close_directly(
        self, eid: str, cause: Event, err: dict[str, Any], partition: int
    ) -> None:
        """The last resort: even the abort's decision could not be stored."""
        closing = []
        for name, entity_type, status, payload in ending("failed", error=err):
            ev = make_event(
                event_id=derive_id(cause["event_id"], "unstorable", name),
                execution_id=eid,
                timestamp=cause.get("timestamp") or utc_now(),
                source="server",
                name=name,
                entity_type=entity_type,
                entity_id=eid,
                status=status,
                payload=payload,
                cause_id=cause["event_id"],
            )
            closing.append((s.event_subject(partition, eid, name), dumps(ev), ev["event_id"], True))
        await self._until_stored(self._store([], closing, [], partition, None))
        state = self.states.get(eid)
        if state is not None:
            state.finished, state.status, state.failed, state.error = True, "failed", True, err

    def _observe(self, event: Event, outputs: list[Event]) -> None:
        """Metrics see the input and its outputs; a fault in them never stops the engine."""
        assert self.observer is not None
        try:
            self.observer(event)
            for ev in outputs:
                self.observer(ev)
        except Exception:
            log.exception("metrics observer failed on %s; decisions go on", event.get("name"))

    def _store(
        self,
        objects: list[tuple[str, bytes]],
        events: list[tuple[str, bytes, str, bool]],
        commands: list[tuple[str, bytes, str]],
        partition: int,
        seq: int | None,
        armed: list[dict[str, Any]] | None = None,
    ) -> Any:
        """Events ride on the ack of the batch's last one (``Outbox``), except those clients wait
        for; every command is acknowledged on its own, as a lost one would stall its execution.
        Timers are stored before the checkpoint moves, like the decisions that armed them."""

        async def attempt() -> None:
            if objects:
                obs = await self.bus.objects(s.RESULTS_BUCKET)
                for key, data in objects:
                    await obs.put(key, data)
            outbox = self.bus.outbox(ack_all=self._ack_all, confirm_every=None)
            last = len(events) - 1
            for i, (subject, data, msg_id, waited_for) in enumerate(events):
                await outbox.send(subject, data, msg_id, ack=waited_for or i == last)
            for subject, data, msg_id in commands:
                await outbox.send(subject, data, msg_id, ack=True)
            await outbox.confirm()
            if armed:
                await timers.arm(self.bus, armed)
            # the checkpoint moves only after the decisions are stored
            if seq is not None:
                await self._checkpoint_to(partition, seq)

        return attempt

    async def _checkpoint_to(self, partition: int, seq: int | None, *, now: bool = False) -> None:
        """Write the checkpoint at most every CHECKPOINT_EVERY seconds, and when the partition idles.

        A checkpoint behind the last stored decisions costs only re-deciding the inputs after it
        when the server restarts (same ids, so JetStream drops the copies); a sequential flow, one
        input per batch, would otherwise write one per step. Not acknowledged, for the same reason.
        """
        if seq is not None:
            self._unsaved[partition] = seq
        loop_now = asyncio.get_running_loop().time()
        if partition not in self._unsaved or not (now or loop_now >= self._next_save.get(partition, 0.0)):
            return
        self._next_save[partition] = loop_now + CHECKPOINT_EVERY
        seq = self._unsaved[partition]
        floor = self.lanes.floor(partition)
        if floor is not None and floor <= seq:
            seq = floor - 1  # a slow lane has not stored it yet; the rest is written when it has
        else:
            del self._unsaved[partition]
        await self.kv.put_nowait(s.checkpoint_key(partition), str(seq).encode())

    def _purge_snapshots(self, loops: list[tuple[str, str]]) -> None:
        """One purge per ended loop instead of one per iteration; not awaited: a purge lost to a
        crash leaves snapshots of finished iterations, which nothing reads again."""
        for execution_id, run_id in loops:
            self._in_background(self.iter_kv.purge(s.iter_snapshot_keys(execution_id, run_id)))

    def _in_background(self, work: Any) -> None:
        """Work nobody waits for; its failure only leaves something unread behind (logged)."""

        async def run() -> None:
            try:
                await work
            except Exception as e:
                log.info("background work failed: %s", describe(e))

        task = asyncio.create_task(run())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _until_stored(self, attempt: Any) -> None:
        """Decisions are made once and have fixed ids: on a NATS outage, publish them again. A
        refusal that no retry can change raises ``_Unstorable``."""
        delay = 0.1
        while True:
            try:
                await attempt()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                if isinstance(e, RefusedError):
                    raise _Unstorable(str(e)) from e
                log.warning("storing decisions failed (%s); retrying in %.1f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _decide(self, event: Event, seq: int, partition: int) -> Any:
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
                        also=_NATS_ERRORS,
                    )
                )
            else:
                state = await retrying(
                    lambda: self._rebuild(eid, seq), f"rebuilding {eid}", also=_NATS_ERRORS
                )
                if state is None:
                    log.warning("event %s for unknown execution %s ignored", event.get("event_id"), eid)
                    return None
            self.states[eid] = state
            self._state_partition[eid] = partition
        elif event["name"] == "playbook.execution.requested":
            return None  # a repeated request event: already started
        if state.finished:
            return None
        began = time.perf_counter()
        decision = decide(state, event)
        if time.perf_counter() - began > SLOW_DECISION_S:
            self.lanes.open(eid, partition, state)
        return decision

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
                    raise UnavailableError(
                        f"rebuilding {execution_id}: its input at sequence {before_seq} was not read back "
                        f"within {REBUILD_PATIENCE:g} s (a replica behind the stream); reading again"
                    )
        finally:
            with contextlib.suppress(Exception):
                await reader.close()
        state, _ = replay([await self.catalog.with_playbook_text(loads(m.data)) for m in msgs])
        return state


async def _hold(msg: Any, every: float = REQUEST_ACK_WAIT / 3) -> None:
    """In-progress acks while a message is being handled, so its ack wait does not run out."""
    while True:
        await asyncio.sleep(every)
        with contextlib.suppress(Exception):
            await msg.in_progress()


class _Outputs:
    """One execution's share of a batch's outputs, and the input that caused the last of them."""

    __slots__ = ("cause", "commands", "disarm", "events", "objects", "timers")

    def __init__(self, cause: Event) -> None:
        self.cause = cause
        self.timers: list[dict[str, Any]] = []
        self.disarm: list[str] = []
        self.objects: list[tuple[str, bytes]] = []
        self.events: list[tuple[str, bytes, str, bool]] = []
        self.commands: list[tuple[str, bytes, str]] = []


class _Unstorable(Exception):
    """JetStream refused a batch for a reason no retry changes."""
