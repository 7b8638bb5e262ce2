"""Storing the server's decisions: a batch's outputs grouped by execution, published through the
outbox (objects, then events, then commands), the partition's checkpoint moved after them, and
the rare batch JetStream can never store split up so that only its execution ends
(``decision_unstorable``). Part of ``noetl.server.service.Server`` (``noetl.server.parts``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from noetl.dsl.errors import DecisionUnstorableError
from noetl.engine.endings import ending
from noetl.events import subjects as s
from noetl.events import tracing
from noetl.events.clock import utc_now
from noetl.events.envelope import Event, dumps, make_event
from noetl.events.ids import derive_id
from noetl.events.port import BusRefusedError
from noetl.events.retry import describe, retrying
from noetl.events.writer import encode
from noetl.server import timers
from noetl.server.parts import (
    CHECKPOINT_EVERY,
    WAITED_FOR,
    ServerParts,
)
from noetl.server.traces import trace_decision

log = logging.getLogger("noetl.server")


class DecisionStoring(ServerParts):
    def _collect(
        self,
        groups: dict[str, Outputs],
        ended_loops: list[tuple[str, str]],
        partition: int,
        event: Event,
        decision: Any,
    ) -> None:
        if self.observer is not None:
            self._observe(event, decision.events)
        if tracing.enabled():  # spans, and each command's traceparent (off: this check only)
            trace_decision(self.states.get(event["execution_id"]), event, decision)
        group = groups.setdefault(event["execution_id"], Outputs(event))
        group.cause = event
        group.objects.extend(decision.objects)
        group.timers.extend(decision.timers)
        group.disarm.extend(decision.cancel_timers)
        ended_loops.extend((event["execution_id"], run_id) for run_id in decision.ended_loops)
        for ev in decision.events:
            group.events.append((*encode(ev, partition), ev["name"] in WAITED_FOR))
        for cmd in decision.commands:
            group.commands.append((s.command_subject(cmd["pool"]), dumps(cmd), cmd["command_id"]))

    def _disarm(self, groups: dict[str, Outputs]) -> None:
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
        groups: dict[str, Outputs] = {}
        ended_loops: list[tuple[str, str]] = []
        self._collect(groups, ended_loops, partition, event, decision)
        g = groups[event["execution_id"]]
        try:
            await self._until_stored(self._store(g.objects, g.events, g.commands, partition, None, g.timers))
        except DecisionUnstorableError:
            await self._store_each(groups, partition, None)
        if ended_loops:
            self._purge_snapshots(ended_loops)
        self._disarm(groups)
        self.decided += 1
        self._forget_finished()

    async def _store_each(self, groups: dict[str, Outputs], partition: int, seq: int | None) -> None:
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
            except DecisionUnstorableError as e:
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
        """Decisions are made once and have fixed ids: on a NATS outage (any failure but a
        refusal), publish them again (``retrying``). A refusal that no retry can change raises
        ``DecisionUnstorableError``."""
        try:
            await retrying(attempt, "storing decisions", also=(Exception,), never=(BusRefusedError,))
        except BusRefusedError as e:
            raise DecisionUnstorableError(str(e)) from e


class Outputs:
    """One execution's share of a batch's outputs, and the input that caused the last of them."""

    __slots__ = ("cause", "commands", "disarm", "events", "objects", "timers")

    def __init__(self, cause: Event) -> None:
        self.cause = cause
        self.timers: list[dict[str, Any]] = []
        self.disarm: list[str] = []
        self.objects: list[tuple[str, bytes]] = []
        self.events: list[tuple[str, bytes, str, bool]] = []
        self.commands: list[tuple[str, bytes, str]] = []
