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
from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import APIError, KeyNotFoundError, KeyWrongLastSequenceError, NotFoundError

from noetl.dsl.errors import DecisionUnstorableError, DeploymentError
from noetl.engine import ExecutionState, decide, is_input, new_state
from noetl.engine.endings import ending
from noetl.engine.fold import replay
from noetl.events import subjects as s
from noetl.events.bus import read_messages
from noetl.events.clock import utc_now
from noetl.events.envelope import WireError, decode_event, dumps, make_event
from noetl.events.ids import derive_id
from noetl.events.outbox import Outbox
from noetl.events.publisher import Publisher, ignore_result
from noetl.events.puller import Puller, PullError, ack_stored, consumer_sequence, stream_sequence
from noetl.events.retry import describe, is_transient, retrying
from noetl.events.runtime import cancel_and_wait, process_id
from noetl.events.streams import ensure_all, ensure_consumer, replicated
from noetl.server import schedules, timers
from noetl.server.lanes import SLOW_DECISION_S, SlowLanes
from noetl.server.leases import PartitionLeases
from noetl.server.requests import RequestHandler
from noetl.store.catalog import Catalog

log = logging.getLogger("noetl.server")

BATCH = 256
CHECKPOINT_EVERY = 0.1  # seconds
# events someone waits for (clients follow an execution to its end): acknowledged one by one
_WAITED_FOR = frozenset({"workflow.finished", "playbook.processed"})
_NATS_ERRORS = (nats.errors.Error,)
# a request taken by a replica that then died goes to another one after this many seconds
REQUEST_ACK_WAIT = 10.0
# a partition reader idle this long asks whether its consumer still exists (its node may be gone)
_CONSUMER_CHECK_EVERY = 3.0


class Server:
    def __init__(
        self,
        nc: NATS,
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
        them instead, and ``leases=False`` takes them all (a private NATS with one server)."""
        self.nc = nc
        self.js = nc.jetstream()
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
        self._readers = 0  # consumers created, for unique names
        self.leases: PartitionLeases | None = None
        self.lanes = SlowLanes(self._decide_known, self._store_lane)
        # sees every input the engine decides on and every event it writes (metrics)
        self.observer: Callable[[dict[str, Any]], None] | None = None

    @property
    def owned(self) -> list[int]:
        return sorted(self._loops)

    async def start(self) -> None:
        await ensure_all(self.js, self.replicas)
        if self.credentials is None:
            from noetl.store.credentials import CredentialStore

            self.credentials = await retrying(
                lambda: CredentialStore.open(self.js, None), "opening credentials"
            )
        self.catalog = await retrying(lambda: Catalog.open(self.js), "opening the catalog")
        self.kv = await retrying(lambda: self.js.key_value(s.SERVER_BUCKET), "opening noetl_server")
        self.partitions = await retrying(self._settle_partitions, "reading the partition count")
        self.requests = RequestHandler(self.js, self.catalog, self.credentials, self.partitions)
        for p in range(self.partitions):  # readers of versions before the leases: durable, now unused
            with contextlib.suppress(Exception):
                old = s.partition_reader_name(p)
                await self.nc.publish(s.consumer_delete_subject(s.EVENTS_STREAM, old), b"")
        self._tasks.append(asyncio.create_task(self._request_loop(), name="noetl-requests"))
        self._tasks.append(asyncio.create_task(timers.due_loop(self.nc, self._stopping), name="noetl-timers"))
        self._tasks.append(
            asyncio.create_task(
                schedules.fire_loop(self.nc, self.requests, self._stopping), name="noetl-schedules"
            )
        )
        if self._static is not None or self._all:
            for p in self._static if self._static is not None else range(self.partitions):
                await self._start_partition(p)
        else:
            self.leases = PartitionLeases(
                self.js,
                self.member,
                self.partitions,
                on_acquire=self._start_partition,
                on_release=self._stop_partition,
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

    async def _settle_partitions(self) -> int:
        """The partition count is fixed when the event log is first used: every replica must map an
        execution id to the same partition, and the workers publish to the partition a command
        names. A different ``--partitions`` later is refused rather than splitting the log."""
        try:
            recorded: int | None = int((await self.kv.get(s.PARTITIONS_KEY)).value or b"0") or None
        except KeyNotFoundError:
            recorded = None
        if recorded is None:
            want = self._partitions_arg or s.DEFAULT_PARTITIONS
            try:
                await self.kv.create(s.PARTITIONS_KEY, str(want).encode())
                return want
            except (KeyWrongLastSequenceError, KeyNotFoundError):
                # another replica recorded it first; our node may not show it for a moment
                loop = asyncio.get_running_loop()
                entry = await retrying(
                    lambda: self.kv.get(s.PARTITIONS_KEY),
                    "reading the partition count",
                    also=(KeyNotFoundError,),
                    deadline=loop.time() + 10,
                )
                recorded = int(entry.value or b"0")
        if self._partitions_arg is not None and self._partitions_arg != recorded:
            raise DeploymentError(
                f"--partitions {self._partitions_arg}: this event log was set up with {recorded} partitions "
                f"(key {s.PARTITIONS_KEY} of KV bucket {s.SERVER_BUCKET}); start every server with "
                f"--partitions {recorded}, or leave --partitions out to use the recorded count"
            )
        return recorded

    async def _start_partition(self, partition: int) -> None:
        if partition not in self._loops:
            self._loops[partition] = asyncio.create_task(
                self._partition_loop(partition), name=f"noetl-partition-{partition}"
            )

    async def _stop_partition(self, partition: int) -> None:
        """Stop deciding for ``partition`` and forget its executions: while another replica owns it
        they advance, so what this one holds in memory is stale by the time it owns it again."""
        await cancel_and_wait(self._loops.pop(partition, None))
        await self.lanes.close_partition(partition)
        for eid in [e for e, p in self._state_partition.items() if p == partition]:
            self.states.pop(eid, None)
            self._state_partition.pop(eid, None)

    def _may_decide(self, partition: int) -> bool:
        return self.leases is None or self.leases.valid(partition)

    # --- requests ------------------------------------------------------------------------

    async def _request_loop(self) -> None:
        durable = "noetl-server-requests"
        config = ConsumerConfig(
            durable_name=durable,
            filter_subject=s.REQUESTS_FILTER,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=REQUEST_ACK_WAIT,
            max_deliver=5,
        )
        await retrying(lambda: ensure_consumer(self.js, s.REQUESTS_STREAM, config), "request consumer")
        puller = await Puller(self.nc, s.REQUESTS_STREAM, durable).start()
        try:
            while not self._stopping.is_set():
                try:
                    msgs = await puller.fetch(64, wait=1.0)
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
                await puller.stop(nak=True)  # requests delivered and not handled: to the next server now

    async def _request(self, m: Any) -> None:
        """Recorded with the same ids until it is stored (through an election, holding the message
        with in-progress acks), then acknowledged; only a failure of its own is nak'ed."""
        msg_id = (m.headers or {}).get("Nats-Msg-Id")

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
        await ack_stored(m, "acknowledging a request")

    # --- engine inputs -------------------------------------------------------------------

    async def _checkpoint(self, partition: int) -> int:
        try:
            e = await self.kv.get(s.checkpoint_key(partition))
            return int(e.value or b"0")
        except KeyNotFoundError:
            return 0

    async def _partition_loop(self, partition: int) -> None:
        """Decide the partition's inputs in stream order, from the checkpoint on, while we own it.

        The reader is an ordered consumer (``_read_from``): whatever breaks it (its node gone, a
        message lost on the way, an election) ends it, and a new one starts after the last input
        decided. It needs no acks: the checkpoint is the acknowledgement. An input delivered twice
        is harmless: the engine ignores an input for a run that already ended.
        """
        loop = asyncio.get_running_loop()
        start = await retrying(lambda: self._checkpoint(partition), f"partition {partition}: checkpoint") + 1
        delay = 0.1
        try:
            while not self._stopping.is_set() and self._may_decide(partition):
                began = loop.time()
                try:
                    start = await self._read_from(partition, start)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    (log.info if is_transient(e) or isinstance(e, PullError) else log.exception)(
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

    async def _read_from(self, partition: int, start: int) -> int:
        """Read from stream sequence ``start`` until the consumer breaks; returns where to go on."""
        self._readers += 1
        name = s.partition_reader_name(partition, self.member, self._readers)
        cfg = ConsumerConfig(
            name=name,
            ack_policy=AckPolicy.NONE,
            filter_subjects=s.partition_input_filters(partition),
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=start,
            mem_storage=True,
            num_replicas=1,
            inactive_threshold=30.0,
        )
        await retrying(lambda: self.js.add_consumer(s.EVENTS_STREAM, cfg), f"partition {partition}: reader")
        loop = asyncio.get_running_loop()
        puller = await Puller(self.nc, s.EVENTS_STREAM, name, batch=BATCH).start()
        expected = 1
        idle_since = loop.time()
        try:
            while not self._stopping.is_set() and self._may_decide(partition):
                batch = await puller.fetch(BATCH, wait=1.0)
                if not batch:
                    await self._checkpoint_to(partition, None, now=True)
                    if loop.time() - idle_since >= _CONSUMER_CHECK_EVERY:
                        idle_since = loop.time()
                        try:
                            await self.js.consumer_info(s.EVENTS_STREAM, name, timeout=2.0)
                        except NotFoundError:
                            return start  # gone with its node: read again from where we are
                        except Exception as e:
                            if not is_transient(e):
                                raise
                    continue
                idle_since = loop.time()
                good = []
                for m in batch:
                    if consumer_sequence(m) != expected:
                        break  # a message lost on the way: never decide past a gap
                    expected += 1
                    good.append(m)
                if good:
                    await self._process_batch(partition, good)
                    start = stream_sequence(good[-1]) + 1
                if len(good) < len(batch):
                    log.warning("partition %d: a gap in the inputs; reading again from %d", partition, start)
                    return start
            return start
        finally:
            await puller.stop()
            with contextlib.suppress(Exception):
                await self.nc.publish(s.consumer_delete_subject(s.EVENTS_STREAM, name), b"")

    async def _process_batch(self, partition: int, batch: list[Any]) -> None:
        # outputs by execution: stored together, or one execution at a time for the rare batch
        # JetStream can never store (``_store_each``)
        groups: dict[str, _Outputs] = {}
        ended_loops: list[tuple[str, str]] = []
        last_seq = 0
        for msg in batch:
            last_seq = stream_sequence(msg)
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
            await self._purge_snapshots(ended_loops)
        await self._disarm(groups)
        self.decided += len(batch)
        self._forget_finished()

    def _collect(
        self,
        groups: dict[str, _Outputs],
        ended_loops: list[tuple[str, str]],
        partition: int,
        event: dict[str, Any],
        decision: Any,
    ) -> None:
        if self.observer is not None:
            self._observe(event, decision.events)
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

    async def _disarm(self, groups: dict[str, _Outputs]) -> None:
        """Timers of runs that ended, and every timer of an execution that finished."""
        for eid, g in groups.items():
            state = self.states.get(eid)
            if state is not None and state.finished and timers.uses_timers(state.playbook):
                await timers.disarm(self.nc, eid)
            elif g.disarm:
                await timers.disarm(self.nc, eid, g.disarm)

    def _forget_finished(self) -> None:
        for eid in [e for e, st in self.states.items() if st.finished]:
            st = self.states.pop(eid)
            self._state_partition.pop(eid, None)
            log.info(
                "execution finished",
                extra={"execution_id": eid, "status": st.status, "playbook": st.playbook.metadata.path},
            )

    async def _store_lane(self, partition: int, event: dict[str, Any], decision: Any) -> None:
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
            await self._purge_snapshots(ended_loops)
        await self._disarm(groups)
        self.decided += 1
        self._forget_finished()

    async def _store_each(self, groups: dict[str, _Outputs], partition: int, seq: int) -> None:
        """JetStream refused something of the batch for good (a message over the server's
        ``max_payload``, a subject it cannot take): store each execution's outputs alone, and end
        the one whose outputs can never be stored with ``decision_unstorable`` instead of retrying
        it forever and stalling every execution of the partition behind it."""
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
            refusal = []
            for name, entity_type, status, payload in ending("failed", error=err):
                ev = make_event(
                    event_id=derive_id(g.cause["event_id"], "unstorable", name),
                    execution_id=eid,
                    timestamp=g.cause.get("timestamp") or utc_now(),
                    source="server",
                    name=name,
                    entity_type=entity_type,  # type: ignore[arg-type]
                    entity_id=eid,
                    status=status,  # type: ignore[arg-type]
                    payload=payload,  # type: ignore[arg-type]
                    cause_id=g.cause["event_id"],
                )
                refusal.append((s.event_subject(partition, eid, name), dumps(ev), ev["event_id"], True))
            await self._until_stored(self._store([], refusal, [], partition, None))
            state = self.states.get(eid)
            if state is not None:
                state.finished, state.status, state.failed, state.error = True, "failed", True, err
        await self._checkpoint_to(partition, seq)

    def _observe(self, event: dict[str, Any], outputs: list[dict[str, Any]]) -> None:
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
                obs = await self.js.object_store(s.RESULTS_BUCKET)
                for key, data in objects:
                    await obs.put(key, data)
            outbox = Outbox(self.nc, confirm_every=None, ack_all=self._ack_all)
            last = len(events) - 1
            for i, (subject, data, msg_id, waited_for) in enumerate(events):
                await outbox.send(subject, data, msg_id, ack=waited_for or i == last)
            for subject, data, msg_id in commands:
                await outbox.send(subject, data, msg_id, ack=True)
            await outbox.confirm()
            if armed:
                await timers.arm(self.js, armed)
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
        key = s.kv_subject(s.SERVER_BUCKET, s.checkpoint_key(partition))
        await self.nc.publish(key, str(seq).encode())

    async def _purge_snapshots(self, loops: list[tuple[str, str]]) -> None:
        """One purge per ended loop instead of one per iteration; not awaited: a purge lost to a
        crash leaves snapshots of finished iterations, which nothing reads again."""
        pub = await Publisher.of(self.nc)
        for execution_id, run_id in loops:
            req = dumps({"filter": s.iter_snapshots_filter(execution_id, run_id)})
            with contextlib.suppress(Exception):
                fut = await pub.publish(s.stream_purge_subject(s.ITER_STREAM), req)
                fut.add_done_callback(ignore_result)

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
                if _never_storable(e):
                    raise _Unstorable(str(e)) from e
                log.warning("storing decisions failed (%s); retrying in %.1f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _decide(self, event: dict[str, Any], seq: int, partition: int) -> Any:
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
    def _decide_known(state: ExecutionState, event: dict[str, Any]) -> Any:
        """A lane's decision (in a thread): the engine alone, on a state already in memory."""
        if state.finished or event["name"] == "playbook.execution.requested":
            return None
        return decide(state, event)

    async def _rebuild(self, execution_id: str, before_seq: int) -> ExecutionState | None:
        msgs = await read_messages(
            self.js, s.EVENTS_STREAM, s.execution_input_filters(execution_id), before_seq=before_seq
        )
        state, _ = replay([await self.catalog.with_playbook_text(e) for _, e in msgs])
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

    def __init__(self, cause: dict[str, Any]) -> None:
        self.cause = cause
        self.timers: list[dict[str, Any]] = []
        self.disarm: list[str] = []
        self.objects: list[tuple[str, bytes]] = []
        self.events: list[tuple[str, bytes, str, bool]] = []
        self.commands: list[tuple[str, bytes, str]] = []


class _Unstorable(Exception):
    """JetStream refused a batch for a reason no retry changes."""


def _never_storable(e: BaseException) -> bool:
    """Refusals of the message itself, never of the moment: a payload over ``max_payload``, a bad
    subject, a stream answering 400 (e.g. message size exceeds the stream's maximum). Anything
    else might pass with time and is retried."""
    if isinstance(e, nats.errors.MaxPayloadError | nats.errors.BadSubjectError):
        return True
    return isinstance(e, APIError) and e.code == 400 and not is_transient(e)
