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
from collections.abc import Callable
from typing import Any

from noetl.dsl.errors import DeploymentError
from noetl.engine import ExecutionState
from noetl.events import subjects as s
from noetl.events import supervise
from noetl.events.envelope import Event
from noetl.events.port import (
    Bus,
    Entry,
    KeyExistsError,
)
from noetl.events.retry import describe, retrying
from noetl.events.runtime import cancel_and_wait, process_id
from noetl.events.streams import replicated
from noetl.server import schedules, timers
from noetl.server.intake import RequestIntake
from noetl.server.lanes import SlowLanes
from noetl.server.leases import PartitionLeases
from noetl.server.partitions import PartitionReading
from noetl.server.parts import BATCH, CHECKPOINT_EVERY, READER_GRACE, REQUEST_ACK_WAIT
from noetl.server.requests import RequestHandler
from noetl.store.catalog import Catalog

log = logging.getLogger("noetl.server")

__all__ = ["BATCH", "CHECKPOINT_EVERY", "READER_GRACE", "REQUEST_ACK_WAIT", "Server"]


class Server(PartitionReading, RequestIntake):
    """The control plane of one replica, assembled from its parts: ``PartitionReading`` (with
    ``DecisionStoring``) decides the partitions it owns, ``RequestIntake`` records requests; this
    module starts and stops them, settles the partition count and follows the leases."""

    def __init__(
        self,
        bus: Bus,
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
        ``bus``: the bus port (``noetl.events.port``), chosen where the process is assembled;
        ``replicas`` should be the one that bus was made with, for the streams this server adds."""
        self.bus: Bus = bus
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

    # --- requests ------------------------------------------------------------------------

    # --- engine inputs -------------------------------------------------------------------
