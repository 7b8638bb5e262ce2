"""The data plane: pulls commands for its pool and runs them, several at once.

A command is held with in-progress acks (the lease, ``noetl.worker.delivery``) while it runs and
acked only after its terminal event is stored. The run itself (``noetl.worker.command``, or
``noetl.worker.local_loop`` for an ``exec: local`` loop) owns its events and its terminal event;
the worker hands it a ``RunContext`` (``noetl.worker.lifecycle``) and keeps the message: its slot,
its lease, its ack, and the redelivery bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from typing import Any

from noetl.dsl.cache import parse_playbook
from noetl.dsl.errors import DeploymentError, NoetlError, WorkerLostError
from noetl.dsl.model import Playbook, Step
from noetl.dsl.names import pool_problem
from noetl.events import subjects as s
from noetl.events import supervise, tracing
from noetl.events.envelope import Command, WireError, decode_command
from noetl.events.histogram import Histogram
from noetl.events.masking import Masker
from noetl.events.port import Bus, BusError, Delivery, QueueConfig, WorkQueue
from noetl.events.retry import retrying
from noetl.events.streams import replicated
from noetl.host import logs
from noetl.store.audit import ensure_audit_stream
from noetl.store.catalog import Catalog
from noetl.worker.command import CommandRun
from noetl.worker.command_events import NO_SECRETS, CommandEvents
from noetl.worker.delivery import Leases, Redeliveries, Slots
from noetl.worker.interrupts import Interrupts
from noetl.worker.keychain import read_keychain
from noetl.worker.lifecycle import RunContext
from noetl.worker.local_loop import LocalLoop

log = logging.getLogger("noetl.worker")


class Worker:
    def __init__(
        self,
        bus: Bus,
        *,
        pool: str = s.DEFAULT_POOL,
        concurrency: int = 16,
        credentials: Any = None,
        replicas: int | None = None,
    ) -> None:
        if problem := pool_problem(pool):
            raise DeploymentError(f"--pool: {problem}")
        # a bus port (noetl.events.port): NATS, or the in-memory twin of behaviour tests
        self.bus: Bus = bus
        raw = getattr(self.bus, "nc", None)
        self.nc, self.js = raw, (raw.jetstream() if raw is not None else None)
        self.replicas = replicas
        self._ack_all = replicated(replicas)  # see Outbox: every event acked on replicated streams
        self.pool, self.concurrency = pool, concurrency
        self.credentials = credentials
        from noetl.events.settings import setting

        # read once here, not at import: a bad value is refused by the process that uses it
        self.ack_wait: float = setting("ack_wait")
        self.max_deliver: int = setting("max_deliver")
        self.slots = Slots(concurrency)
        self.leases = Leases(self.ack_wait)
        self.redeliveries = Redeliveries()
        self.interrupts = Interrupts()
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self._playbooks: dict[str, Playbook] = {}
        self.services: dict[str, Any] = {"js": self.js, "nc": self.nc, "bus": self.bus}
        self.completed = 0
        # task run durations by outcome status, reported with the runtime heartbeat (/metrics)
        self.task_durations: dict[str, Histogram] = {}
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._cancel_sub: Any = None
        self._stop_sub: Any = None

    @property
    def busy(self) -> int:
        """Commands running here now (``/metrics``, the runtime heartbeat)."""
        return self.slots.busy

    async def start(self) -> None:
        bus = self.bus
        await bus.prepare(self.replicas)  # waits out a cluster still electing its leaders
        if self.credentials is None:
            from noetl.store.credentials import CredentialStore

            self.credentials = await retrying(lambda: CredentialStore.open(bus, None), "opening credentials")
        # independent, so opened together (the audit stream's creation alone is ~9 ms of a
        # `noetl run`)
        self.catalog, _, self.iter_kv = await supervise.gather_settled(
            retrying(lambda: Catalog.open(bus), "opening the catalog"),
            retrying(lambda: ensure_audit_stream(bus, self.replicas), "audit stream"),
            retrying(lambda: bus.kv(s.ITER_BUCKET), "opening noetl_iter"),
        )
        self.services["catalog"] = self.catalog
        self.runs = RunContext(
            bus=bus,
            worker_id=self.worker_id,
            services=self.services,
            iter_kv=self.iter_kv,
            interrupts=self.interrupts,
            task_durations=self.task_durations,
            ack_all=self._ack_all,
        )
        import noetl.worker.tools  # noqa: F401  (registers the kinds)

        self._cancel_sub = await bus.subscribe(s.CANCEL_EVENTS_FILTER, self.interrupts.on_cancel)
        self._stop_sub = await bus.subscribe(s.STEP_CANCELLED_FILTER, self.interrupts.on_step_cancelled)
        leases = self.leases
        self._lease_task = supervise.start(
            f"worker {self.pool} in-progress acks", leases.loop, lambda: not leases.active
        )
        self._loop_task = supervise.start(
            f"worker {self.pool} command pulls", self._pull_loop, self._stopping
        )

    async def stop(self, drain: bool = True) -> None:
        """Stop pulling; with ``drain`` let running commands finish (SIGTERM), else abandon them."""
        self._stopping.set()
        for sub in (self._cancel_sub, self._stop_sub):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        if self._loop_task:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._loop_task
        running = self.slots.running
        if drain and running:
            await asyncio.gather(*running, return_exceptions=True)
        for t in list(running):
            t.cancel()
        self.leases.active = False
        if self._lease_task:
            self._lease_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._lease_task
        from noetl.worker.tools import close_all

        with contextlib.suppress(Exception):
            await close_all()

    async def _pull_loop(self) -> None:
        config = QueueConfig(
            s.COMMANDS_STREAM,
            s.worker_consumer(self.pool),
            s.command_subject(self.pool),
            ack_wait=self.ack_wait,
            max_deliver=-1,
        )
        queue = await self.bus.queue(config)
        try:
            await self._pull(queue)
        finally:
            await queue.close(nak=True)  # commands delivered and not started: back to the pool now

    async def _pull(self, queue: WorkQueue) -> None:
        while not self._stopping.is_set():
            free = self.slots.free
            if free <= 0:
                await self.slots.freed()
                continue
            try:
                msgs = await queue.fetch(min(free, 64), 1.0)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("command fetch failed: %s", e)
                await asyncio.sleep(0.2)
                continue
            for m in msgs:
                self.slots.take(asyncio.create_task(self._handle(m)))

    async def _handle(self, msg: Delivery) -> None:
        self.leases.hold(msg)
        try:
            try:
                cmd = decode_command(msg.data)
            except WireError as e:
                if e.newer:  # a newer worker beside this one can run it
                    log.error("command left for a newer worker: %s", e)
                    await msg.nak(delay=5)
                else:  # no worker can ever run it: drop it instead of redelivering forever
                    log.error("dropped a malformed command on %s: %s", msg.subject, e)
                    await msg.term()
                return
            cid = cmd["command_id"]
            if msg.delivered > 1 and await self.redeliveries.ran_here(cid):
                await msg.ack()  # its terminal event is stored: this delivery only needs its ack
                return
            with self.redeliveries.running(cid):
                if msg.delivered >= self.max_deliver and self.max_deliver > 1:
                    await self._worker_lost(cmd, msg.delivered)
                else:
                    await self._run_command(cmd, msg.delivered)
                # the terminal event is stored: only now may the command leave the work queue
                await msg.ack()
                self.redeliveries.finished(cid)
            self.completed += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("command failed in the worker; it will be redelivered")
            with contextlib.suppress(Exception):
                await msg.nak(delay=1)
        finally:
            self.leases.release(msg)

    async def _worker_lost(self, cmd: Command, delivered: int) -> None:
        """NOETL_MAX_DELIVER (default 5): a command delivered this many times keeps killing
        workers: it ends as worker_lost instead. The worker decides that, not JetStream: the
        consumer delivers without limit, so a command is never dropped unanswered (a worker_lost
        event that cannot be stored is tried again at the next delivery)."""
        err = WorkerLostError(
            f"step {cmd['step']}: its command was delivered {delivered} times and no worker "
            "finished it (workers crashing or killed while running it, e.g. out of memory); "
            "not trying again"
        ).to_dict()
        await self._fail(cmd, err)

    async def _playbook(self, digest: str) -> Playbook:
        pb = self._playbooks.get(digest)
        if pb is None:
            text = await retrying(lambda: self.catalog.get_by_digest(digest), "reading a playbook")
            if text is None:
                raise LookupError(f"playbook {digest} is not in the catalog")
            pb = self._playbooks[digest] = parse_playbook(text, "catalog")
        return pb

    async def _keychain(
        self, playbook: Playbook, cmd: Command
    ) -> tuple[dict[str, Any], dict[str, str | None]]:
        return await read_keychain(self.bus, self.credentials, self.worker_id, playbook, cmd)

    async def _run_command(self, cmd: Command, delivered: int) -> None:
        # each command runs in a task of its own, so these bindings end with it
        logs.bind(execution_id=cmd.get("execution_id"), step=cmd.get("step"), index=cmd.get("index"))
        if tracing.enabled():  # off: this check only
            trace = str(cmd.get("trace_id") or cmd["execution_id"])
            with tracing.span(
                f"command {cmd['step']}",
                trace,
                parent=str(cmd.get("traceparent") or "") or tracing.root_span(trace, cmd["execution_id"]),
                span_id=tracing.span_int(trace, "command", cmd["command_id"], delivered),
                attributes={
                    "execution_id": cmd["execution_id"],
                    "command_id": cmd["command_id"],
                    "step": cmd["step"],
                    "pool": self.pool,
                    "delivered": delivered,
                    "worker": self.worker_id,
                },
            ):
                await self._run_bound(cmd, delivered)
        else:
            await self._run_bound(cmd, delivered)
        log.debug("command done")

    async def _run_bound(self, cmd: Command, delivered: int) -> None:
        playbook = await self._playbook(cmd["playbook_digest"])
        step = playbook.step(cmd["step"])
        try:
            keychain, kinds = await self._keychain(playbook, cmd)
        except BusError:
            raise  # NATS unreachable: not the command's failure; it is delivered again
        except NoetlError as e:  # e.g. no key to decrypt the store: say so, do not retry forever
            await self._fail(cmd, e.to_dict(), playbook, step)
            return
        masker = Masker(keychain, kinds=kinds) if keychain else NO_SECRETS
        runner = LocalLoop if "local" in cmd else CommandRun
        await runner(self.runs, cmd, playbook, step, keychain, masker).run(delivered > 1)

    async def _fail(
        self, cmd: Command, error: dict[str, Any], playbook: Playbook | None = None, step: Step | None = None
    ) -> None:
        """A command that cannot run: its terminal event says why (for an ``exec: local`` loop,
        its first iteration's, the others never started)."""
        if "local" not in cmd:
            await CommandEvents(self.runs, cmd).fail(error)
            return
        playbook = playbook or await self._playbook(cmd["playbook_digest"])
        step = step or playbook.step(cmd["step"])
        await LocalLoop(self.runs, cmd, playbook, step, {}, NO_SECRETS).fail(error)
