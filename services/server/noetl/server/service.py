"""The control plane: consumes requests and engine inputs, runs the engine, publishes decisions.

Inputs of one partition are read with an ordered consumer, strictly in stream order, and decided
one after another; the decisions of a batch of inputs are published together and the partition's
checkpoint (the stream sequence of the last input whose outputs are stored) advances only after
their acks. After a restart the server resumes after the checkpoint: an execution it no longer has
in memory is rebuilt by folding its inputs that precede the current one, and the decisions it
recomputes carry the ids they had before, so JetStream drops the ones already stored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from nats.aio.client import Client as NATS
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError, NotFoundError

from noetl.engine import ExecutionState, decide, is_input, new_state
from noetl.engine.fold import replay
from noetl.events import subjects as s
from noetl.events.bus import read_messages
from noetl.events.catalog import Catalog
from noetl.events.envelope import dumps, loads
from noetl.events.outbox import Outbox
from noetl.events.publisher import Publisher, ignore_result
from noetl.events.puller import Puller, stream_sequence
from noetl.events.streams import ensure_all, ensure_consumer
from noetl.server.requests import RequestHandler

log = logging.getLogger("noetl.server")

BATCH = 256
CHECKPOINT_EVERY = 0.1  # seconds
# events someone waits for (clients follow an execution to its end): acknowledged one by one
_WAITED_FOR = frozenset({"workflow.finished", "playbook.processed"})


class Server:
    def __init__(
        self, nc: NATS, *, partitions: int = 1, owned: list[int] | None = None, credentials: Any = None
    ) -> None:
        self.nc = nc
        self.js = nc.jetstream()
        self.partitions = partitions
        self.owned = owned if owned is not None else list(range(partitions))
        self.credentials = credentials
        self.states: dict[str, ExecutionState] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.decided = 0
        self._unsaved: dict[int, int] = {}  # partition -> stored stream sequence not checkpointed yet
        self._next_save: dict[int, float] = {}
        # sees every input the engine decides on and every event it writes (metrics)
        self.observer: Callable[[dict[str, Any]], None] | None = None

    async def start(self) -> None:
        await ensure_all(self.js)
        if self.credentials is None:
            from noetl.events.credentials import CredentialStore

            self.credentials = await CredentialStore.open(self.js, None)
        self.catalog = await Catalog.open(self.js)
        self.kv = await self.js.key_value(s.SERVER_BUCKET)
        self.requests = RequestHandler(self.js, self.catalog, self.credentials, self.partitions)
        self._tasks.append(asyncio.create_task(self._request_loop(), name="noetl-requests"))
        for p in self.owned:
            self._tasks.append(asyncio.create_task(self._partition_loop(p), name=f"noetl-partition-{p}"))

    async def stop(self) -> None:
        self._stopping.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()

    # --- requests ------------------------------------------------------------------------

    async def _request_loop(self) -> None:
        durable = "noetl-server-requests"
        await ensure_consumer(
            self.js,
            s.REQUESTS_STREAM,
            ConsumerConfig(
                durable_name=durable,
                filter_subject=s.REQUESTS_FILTER,
                ack_policy=AckPolicy.EXPLICIT,
                ack_wait=30,
                max_deliver=5,
            ),
        )
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
                # requests are independent of each other: handle a batch at once
                await asyncio.gather(*(self._request(m) for m in msgs))
        finally:
            with contextlib.suppress(Exception):
                await puller.stop(nak=True)  # requests delivered and not handled: to the next server now

    async def _request(self, m: Any) -> None:
        msg_id = (m.headers or {}).get("Nats-Msg-Id")
        try:
            if m.subject == s.CANCEL_SUBJECT:
                await self.requests.cancel(m.data)
            else:
                await self.requests.handle(m.data, msg_id)
        except Exception:
            log.exception("request handling failed; it will be redelivered")
            with contextlib.suppress(Exception):
                await m.nak(delay=1)
            return
        await m.ack()

    # --- engine inputs -------------------------------------------------------------------

    async def _checkpoint(self, partition: int) -> int:
        try:
            e = await self.kv.get(f"checkpoint.p{partition}")
            return int(e.value or b"0")
        except KeyNotFoundError:
            return 0

    async def _partition_loop(self, partition: int) -> None:
        """Read the partition's inputs in order with a durable pull consumer of our own.

        The consumer is recreated from the checkpoint at start (so nothing after the checkpoint is
        skipped however the last process died) and is file-backed (so it survives a nats-server
        restart). It needs no acks: the checkpoint is the acknowledgement. An input delivered twice
        is harmless: the engine ignores an input for a run that already ended.
        """
        name = f"noetl-server-p{partition}"
        start = await self._checkpoint(partition)
        with contextlib.suppress(NotFoundError):
            await self.js.delete_consumer(s.EVENTS_STREAM, name)
        await self.js.add_consumer(
            s.EVENTS_STREAM,
            ConsumerConfig(
                durable_name=name,
                ack_policy=AckPolicy.NONE,
                filter_subjects=s.partition_input_filters(partition),
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE if start else DeliverPolicy.ALL,
                opt_start_seq=start + 1 if start else None,
            ),
        )
        puller = await Puller(self.nc, s.EVENTS_STREAM, name, batch=BATCH).start()
        try:
            while not self._stopping.is_set():
                try:
                    batch = await puller.fetch(BATCH, wait=1.0)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # NATS restarting: the durable consumer is still there after
                    log.warning("event fetch failed (%s); retrying", e)
                    await asyncio.sleep(0.2)
                    continue
                if batch:
                    await self._process_batch(partition, batch)
                else:
                    await self._checkpoint_to(partition, None, now=True)
        finally:
            with contextlib.suppress(Exception):
                await self._checkpoint_to(partition, None, now=True)
            with contextlib.suppress(Exception):
                await puller.stop()

    async def _process_batch(self, partition: int, batch: list[Any]) -> None:
        out: list[tuple[str, bytes, str, bool]] = []
        commands: list[tuple[str, bytes, str]] = []
        objects: list[tuple[str, bytes]] = []
        ended_loops: list[tuple[str, str]] = []
        last_seq = 0
        for msg in batch:
            last_seq = stream_sequence(msg)
            try:
                event = loads(msg.data)
            except ValueError:
                log.warning("ignored a malformed message on %s", msg.subject)
                continue
            if not isinstance(event, dict) or not is_input(event):
                continue
            try:
                decision = await self._decide(event, last_seq)
            except Exception:
                log.exception(
                    "engine failed on event %s (%s); ignored", event.get("event_id"), event.get("name")
                )
                continue
            if decision is None:
                continue
            if self.observer is not None:
                self._observe(event, decision.events)
            objects.extend(decision.objects)
            ended_loops.extend((event["execution_id"], run_id) for run_id in decision.ended_loops)
            for ev in decision.events:
                subject = s.event_subject(partition, ev["execution_id"], ev["name"])
                out.append((subject, dumps(ev), ev["event_id"], ev["name"] in _WAITED_FOR))
            for cmd in decision.commands:
                commands.append((s.command_subject(cmd["pool"]), dumps(cmd), cmd["command_id"]))
        # objects before the events that refer to them; events before commands, so a worker's
        # events always follow the step.scheduled they answer
        await self._until_stored(self._store(objects, out, commands, partition, last_seq))
        if ended_loops:
            await self._purge_snapshots(ended_loops)
        self.decided += len(batch)
        for eid in [e for e, st in self.states.items() if st.finished]:
            st = self.states.pop(eid)
            log.info(
                "execution finished",
                extra={"execution_id": eid, "status": st.status, "playbook": st.playbook.metadata.path},
            )

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
        seq: int,
    ) -> Any:
        """Events ride on the ack of the batch's last one (``Outbox``), except those clients wait
        for; every command is acknowledged on its own, as a lost one would stall its execution."""

        async def attempt() -> None:
            if objects:
                obs = await self.js.object_store(s.RESULTS_BUCKET)
                for key, data in objects:
                    await obs.put(key, data)
            outbox = Outbox(self.nc, confirm_every=None)
            last = len(events) - 1
            for i, (subject, data, msg_id, waited_for) in enumerate(events):
                await outbox.send(subject, data, msg_id, ack=waited_for or i == last)
            for subject, data, msg_id in commands:
                await outbox.send(subject, data, msg_id, ack=True)
            await outbox.confirm()
            # the checkpoint moves only after the decisions are stored
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
        key = f"$KV.{s.SERVER_BUCKET}.checkpoint.p{partition}"
        await self.nc.publish(key, str(self._unsaved.pop(partition)).encode())

    async def _purge_snapshots(self, loops: list[tuple[str, str]]) -> None:
        """One purge per ended loop instead of one per iteration; not awaited: a purge lost to a
        crash leaves snapshots of finished iterations, which nothing reads again."""
        pub = await Publisher.of(self.nc)
        for execution_id, run_id in loops:
            req = dumps({"filter": s.iter_snapshots_filter(execution_id, run_id)})
            with contextlib.suppress(Exception):
                fut = await pub.publish(f"$JS.API.STREAM.PURGE.{s.ITER_STREAM}", req)
                fut.add_done_callback(ignore_result)

    async def _until_stored(self, attempt: Any) -> None:
        """Decisions are made once and have fixed ids: on a NATS outage, publish them again."""
        delay = 0.1
        while True:
            try:
                await attempt()
                return
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("storing decisions failed (%s); retrying in %.1f s", e, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)

    async def _decide(self, event: dict[str, Any], seq: int) -> Any:
        eid = event.get("execution_id")
        if not isinstance(eid, str):
            return None
        state = self.states.get(eid)
        if state is None:
            if event["name"] == "playbook.execution.requested":
                state = new_state(await self.catalog.with_playbook_text(event))
            else:
                state = await self._rebuild(eid, seq)
                if state is None:
                    log.warning("event %s for unknown execution %s ignored", event.get("event_id"), eid)
                    return None
            self.states[eid] = state
        elif event["name"] == "playbook.execution.requested":
            return None  # a repeated request event: already started
        if state.finished:
            return None
        return decide(state, event)

    async def _rebuild(self, execution_id: str, before_seq: int) -> ExecutionState | None:
        msgs = await read_messages(
            self.js, s.EVENTS_STREAM, s.execution_input_filters(execution_id), before_seq=before_seq
        )
        state, _ = replay([await self.catalog.with_playbook_text(e) for _, e in msgs])
        return state
