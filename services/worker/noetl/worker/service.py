"""The data plane: pulls commands for its pool and runs them, several at once.

A command is held with in-progress acks (the lease) while it runs and acked only after its
terminal event is stored. Event ids derive from the command id, so a command that runs again after
a worker died publishes the same ids and JetStream keeps the first of each. Loop iterations write
a snapshot to ``noetl_iter`` after every task; a redelivered iteration resumes from it.

A run's events before its terminal one (``step.started``, ``task.*``) are for people and tools,
not for the engine: they go out without waiting and are confirmed with the terminal event
(``noetl.events.outbox``). Snapshots go out without waiting too: one lost to a crash only means
the iteration resumes from an earlier one, which at-least-once task runs allow anyway. The server
purges a loop's snapshots when the loop ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from functools import partial
from typing import Any

from noetl.dsl.cache import parse_playbook
from noetl.dsl.errors import (
    AbortedError,
    DeploymentError,
    ExecutionCancelledError,
    NoetlError,
    PayloadTooLargeError,
    WorkerLostError,
)
from noetl.dsl.model import Playbook
from noetl.dsl.names import pool_problem
from noetl.events import subjects as s
from noetl.events import supervise, tracing
from noetl.events import vocabulary as vocab
from noetl.events.clock import utc_now
from noetl.events.envelope import (
    Command,
    EntityType,
    EventName,
    WireError,
    decode_command,
    dumps,
    loads,
    make_event,
)
from noetl.events.histogram import Histogram
from noetl.events.ids import derive_id
from noetl.events.masking import Masker
from noetl.events.port import Bus, BusError, QueueConfig
from noetl.events.retry import is_transient, retrying
from noetl.events.streams import replicated
from noetl.host import logs
from noetl.store.audit import ensure_audit_stream, record_credential_access
from noetl.store.catalog import Catalog
from noetl.worker.command import CommandRun, LocalLoop
from noetl.worker.pipeline import Pipeline, RunResult, Snapshot

log = logging.getLogger("noetl.worker")

# The lease (NOETL_ACK_WAIT, read per worker from the settings, default 30 s): a command not acked
# or touched (in-progress ack) within it goes to another worker.
# NOETL_MAX_DELIVER (default 5): a command delivered this many times keeps killing workers: it ends
# as worker_lost instead. The worker decides that, not JetStream: the consumer delivers without
# limit, so a command is never dropped unanswered (a worker_lost event that cannot be stored is
# tried again at the next delivery).
_CANCELLED_KEEP = 10_000
# command ids this worker finished, so a redelivery of one (its ack lost to a pause) is not run again
_DONE_KEEP = 10_000
# JetStream refuses messages over 1 MiB; leave room for the envelope
MAX_TERMINAL_BYTES = 900 * 1024
_NO_SECRETS = Masker()  # a playbook without a keychain masks nothing: no masker per command


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
        self._running: set[asyncio.Task[None]] = set()
        self._slot_freed: asyncio.Future[None] | None = None
        self._leases: dict[int, Any] = {}  # messages of running commands by id, touched by one ticker
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._leasing = True  # until stop() has drained the running commands
        self._stopping = asyncio.Event()
        self._playbooks: dict[str, Playbook] = {}
        self.services: dict[str, Any] = {"js": self.js, "nc": self.nc, "bus": self.bus}
        self.completed = 0
        # task run durations by outcome status, reported with the runtime heartbeat (/metrics)
        self.task_durations: dict[str, Histogram] = {}
        self.worker_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self._cancelled: dict[str, None] = {}  # execution ids, oldest first
        # commands running here (done when their run ends) and finished here, oldest first
        self._active: dict[str, asyncio.Future[None]] = {}
        self._finished_here: dict[str, None] = {}
        # command tasks inside their pipeline run, by execution: what a cancellation interrupts
        self._by_execution: dict[str, set[asyncio.Task[Any]]] = {}
        self._interrupted: set[asyncio.Task[Any]] = set()
        self._cancel_sub: Any = None
        # step runs the server stopped (a time limit, SEMANTICS §16), and their running commands
        self._stopped_runs: dict[str, None] = {}
        self._by_run: dict[str, set[asyncio.Task[Any]]] = {}
        self._stop_sub: Any = None

    async def start(self) -> None:
        bus = self.bus
        await bus.prepare(self.replicas)  # waits out a cluster still electing its leaders
        if self.credentials is None:
            from noetl.store.credentials import CredentialStore

            self.credentials = await retrying(lambda: CredentialStore.open(bus, None), "opening credentials")
        self.catalog = await retrying(lambda: Catalog.open(bus), "opening the catalog")
        await retrying(lambda: ensure_audit_stream(bus, self.replicas), "audit stream")
        self.iter_kv = await retrying(lambda: bus.kv(s.ITER_BUCKET), "opening noetl_iter")
        self.services["catalog"] = self.catalog
        import noetl.worker.tools  # noqa: F401  (registers the kinds)

        self._cancel_sub = await bus.subscribe(s.CANCEL_EVENTS_FILTER, self._on_cancel)
        self._stop_sub = await bus.subscribe(s.STEP_CANCELLED_FILTER, self._on_step_cancelled)
        self._lease_task = supervise.start(
            f"worker {self.pool} in-progress acks", self._lease_loop, lambda: not self._leasing
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
        if drain and self._running:
            await asyncio.gather(*self._running, return_exceptions=True)
        for t in list(self._running):
            t.cancel()
        self._leasing = False
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

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if self._slot_freed is not None and not self._slot_freed.done():
            self._slot_freed.set_result(None)

    async def _pull(self, queue: Any) -> None:
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._slot_freed = asyncio.get_running_loop().create_future()
                await self._slot_freed
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
                t = asyncio.create_task(self._handle(m))
                self._running.add(t)
                t.add_done_callback(self._done)

    async def _lease_loop(self) -> None:
        """One ticker for every running command instead of a timer each: in-progress acks."""
        while self._leasing:  # a flag, not only the cancel: see RuntimeRegistrar._loop
            await asyncio.sleep(self.ack_wait / 3)
            for msg in list(self._leases.values()):
                with contextlib.suppress(Exception):
                    await msg.in_progress()

    async def _on_cancel(self, msg: Any) -> None:
        """Stop this execution's running commands; its later commands end at once as cancelled."""
        try:
            execution_id = loads(msg.data)["execution_id"]
        except (ValueError, KeyError, TypeError):
            return
        self._cancelled[execution_id] = None
        while len(self._cancelled) > _CANCELLED_KEEP:
            del self._cancelled[next(iter(self._cancelled))]
        for task in list(self._by_execution.get(execution_id, ())):
            if task not in self._interrupted:
                self._interrupted.add(task)
                task.cancel()

    async def _on_step_cancelled(self, msg: Any) -> None:
        """The server ended a step run (its time limit passed): stop its commands still running;
        its later commands (loop iterations already queued) end at once."""
        try:
            run_id = loads(msg.data)["step_run_id"]
        except (ValueError, KeyError, TypeError):
            return
        self._stopped_runs[run_id] = None
        while len(self._stopped_runs) > _CANCELLED_KEEP:
            del self._stopped_runs[next(iter(self._stopped_runs))]
        for task in list(self._by_run.get(run_id, ())):
            if task not in self._interrupted:
                self._interrupted.add(task)
                task.cancel()

    async def _handle(self, msg: Any) -> None:
        self._leases[id(msg)] = msg
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
            if msg.delivered > 1 and await self._ran_here(cid):
                await msg.ack()  # its terminal event is stored: this delivery only needs its ack
                return
            self._active[cid] = asyncio.get_running_loop().create_future()
            try:
                if msg.delivered >= self.max_deliver and self.max_deliver > 1:
                    await self._worker_lost(cmd, msg.delivered)
                else:
                    await self._run_command(cmd, msg)
                # the terminal event is stored: only now may the command leave the work queue
                await msg.ack()
                self._remember_done(cid)
            finally:
                done = self._active.pop(cid)
                done.set_result(None)
            self.completed += 1
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("command failed in the worker; it will be redelivered")
            with contextlib.suppress(Exception):
                await msg.nak(delay=1)
        finally:
            self._leases.pop(id(msg), None)

    async def _ran_here(self, command_id: str) -> bool:
        """A redelivered command this worker runs right now or has finished: a pause of the whole
        process (a GC pause, a VM stall) outlasted the ack wait, and JetStream handed the command
        back while its first run went on. Running it again would repeat its tool's effect, so
        the redelivery waits for the first run (held with in-progress acks) and is only acked;
        True when that run stored the terminal event, False when it failed (run it again)."""
        first = self._active.get(command_id)
        if first is not None:
            await asyncio.shield(first)
        return command_id in self._finished_here

    def _remember_done(self, command_id: str) -> None:
        self._finished_here[command_id] = None
        while len(self._finished_here) > _DONE_KEEP:
            del self._finished_here[next(iter(self._finished_here))]

    async def _worker_lost(self, cmd: Command, delivered: int) -> None:
        err = WorkerLostError(
            f"step {cmd['step']}: its command was delivered {delivered} times and no worker "
            "finished it (workers crashing or killed while running it, e.g. out of memory); "
            "not trying again"
        ).to_dict()
        await self._fail(cmd, err)

    async def _publish_terminal(
        self,
        cmd: Command,
        ok: bool,
        payload: dict[str, Any],
        outbox: Any = None,
        *,
        confirm: bool = True,
    ) -> None:
        """The terminal event; its ack also confirms the run's earlier events in ``outbox``.
        ``confirm=False``: the caller confirms later (an ``exec: local`` loop, in batches)."""
        index = cmd.get("index")
        name: EventName
        entity: EntityType
        if index is None:
            name, entity = (vocab.STEP_DONE if ok else vocab.STEP_FAILED), "step"
        else:
            name, entity = (vocab.ITERATION_DONE if ok else vocab.ITERATION_FAILED), "loop"
            payload = {**payload, "index": index}
        payload["worker"] = self.worker_id
        exec_id = cmd["execution_id"]
        if len(dumps(payload)) > MAX_TERMINAL_BYTES:
            ok, name = False, (vocab.STEP_FAILED if index is None else vocab.ITERATION_FAILED)
            err = PayloadTooLargeError(
                f"step {cmd['step']}: its ctx patches and result take more than {MAX_TERMINAL_BYTES} bytes; "
                "keep large data in task results (they travel by reference) and put only references "
                "or small values in set_ctx"
            )
            payload = {
                "result": None,
                "error": err.to_dict(),
                "worker": self.worker_id,
                **({"index": index} if index is not None else {}),
            }
        ev = make_event(
            event_id=derive_id(cmd["command_id"], "terminal"),
            timestamp=utc_now(),
            source="worker",
            name=name,
            entity_type=entity,
            entity_id=cmd["step"],
            status="success" if ok else "error",
            payload=payload,
            execution_id=exec_id,
            step_run_id=cmd["step_run_id"],
            parent_execution_id=cmd.get("parent_execution_id"),
            trace_id=cmd.get("trace_id"),
        )
        subject = s.event_subject(int(cmd.get("partition") or 0), exec_id, name)
        outbox = outbox or self.bus.outbox(ack_all=self._ack_all)
        if not confirm:
            await outbox.send(subject, dumps(ev), ev["event_id"])
            return
        try:
            await outbox.send(subject, dumps(ev), ev["event_id"], ack=True)
        except Exception as e:
            if not is_transient(e):
                raise
        # held with in-progress acks meanwhile: the outcome is known, only storing it is left
        await retrying(outbox.confirm, f"storing the outcome of command {cmd['command_id']}")

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
        """Every credential a command reads is recorded in ``NOETL_AUDIT`` first (the record's id
        derives from the command's, so a redelivered command records its use once). Returns the
        values and their kinds (the kind says what of an entry is secret: noetl.events.masking)."""
        out: dict[str, Any] = {}
        kinds: dict[str, str | None] = {}
        for entry in playbook.keychain:
            # partial, not a lambda: binds this entry (a closure would see the loop's last one)
            got = (
                await retrying(partial(self.credentials.get, entry.name), "reading a credential")
                if self.credentials
                else None
            )
            if got is not None:
                await retrying(
                    partial(
                        record_credential_access,
                        self.bus,
                        action="credential.use",
                        credential=entry.name,
                        who=f"worker:{self.worker_id}",
                        outcome="granted",
                        execution_id=cmd.get("execution_id"),
                        parent_execution_id=cmd.get("parent_execution_id"),
                        kind=got.get("kind"),
                        audit_id=derive_id(cmd["command_id"], "credential", entry.name),
                    ),
                    "recording a credential use",
                )
                out[entry.name] = got.get("data", got)
                # the declared kind, which the server checked against the stored one at the start
                # (keychain_kind_mismatch), decides what of the entry is secret
                kinds[entry.name] = entry.kind or got.get("kind")
        logs.register_keychain(out, kinds)
        return out, kinds

    async def _run_pipeline(
        self,
        execution_id: str,
        pipe: Pipeline,
        snapshot: Snapshot | None,
        iter_: dict[str, Any] | None,
        run_id: str = "",
    ) -> RunResult:
        """Run in this command's own task; a cancellation of the execution, or the server stopping
        the step run, interrupts it here."""
        if execution_id in self._cancelled:
            return _cancelled()
        if run_id in self._stopped_runs:
            return _stopped()
        task = asyncio.current_task()
        assert task is not None
        running = self._by_execution.setdefault(execution_id, set())
        running.add(task)
        of_run = self._by_run.setdefault(run_id, set())
        of_run.add(task)
        try:
            return await pipe.run(snapshot, iter_)
        except asyncio.CancelledError:
            # ours (the execution was cancelled) and nobody else's, e.g. not a shutdown's
            if task in self._interrupted and task.cancelling() == 1:
                task.uncancel()
                return _cancelled() if execution_id in self._cancelled else _stopped()
            raise
        finally:
            self._interrupted.discard(task)
            running.discard(task)
            of_run.discard(task)
            if not running:
                self._by_execution.pop(execution_id, None)
            if not of_run:
                self._by_run.pop(run_id, None)

    async def _run_command(self, cmd: Command, msg: Any) -> None:
        # each command runs in a task of its own, so these bindings end with it
        logs.bind(execution_id=cmd.get("execution_id"), step=cmd.get("step"), index=cmd.get("index"))
        if tracing.enabled():  # off: this check only
            trace = str(cmd.get("trace_id") or cmd["execution_id"])
            with tracing.span(
                f"command {cmd['step']}",
                trace,
                parent=str(cmd.get("traceparent") or "") or tracing.root_span(trace, cmd["execution_id"]),
                span_id=tracing.span_int(trace, "command", cmd["command_id"], msg.delivered),
                attributes={
                    "execution_id": cmd["execution_id"],
                    "command_id": cmd["command_id"],
                    "step": cmd["step"],
                    "pool": self.pool,
                    "delivered": msg.delivered,
                    "worker": self.worker_id,
                },
            ):
                await self._run_bound(cmd, msg)
        else:
            await self._run_bound(cmd, msg)
        log.debug("command done")

    async def _run_bound(self, cmd: Command, msg: Any) -> None:
        playbook = await self._playbook(cmd["playbook_digest"])
        step = playbook.step(cmd["step"])
        try:
            keychain, kinds = await self._keychain(playbook, cmd)
        except BusError:
            raise  # NATS unreachable: not the command's failure; it is delivered again
        except NoetlError as e:  # e.g. no key to decrypt the store: say so, do not retry forever
            await self._fail(cmd, e.to_dict(), playbook, step)
            return
        masker = Masker(keychain, kinds=kinds) if keychain else _NO_SECRETS
        runner = LocalLoop if "local" in cmd else CommandRun
        await runner(self, cmd, playbook, step, keychain, masker).run(msg.delivered > 1)

    async def _fail(
        self, cmd: Command, error: dict[str, Any], playbook: Playbook | None = None, step: Any = None
    ) -> None:
        """A command that cannot run: its terminal event says why (for an ``exec: local`` loop,
        its first iteration's, the others never started)."""
        if "local" not in cmd:
            await self._publish_terminal(cmd, False, {"result": None, "error": error})
            return
        playbook = playbook or await self._playbook(cmd["playbook_digest"])
        step = step or playbook.step(cmd["step"])
        await LocalLoop(self, cmd, playbook, step, {}, _NO_SECRETS).fail(error)


def _stopped() -> RunResult:
    return RunResult(
        ok=False,
        error=AbortedError(
            "the server stopped this step run (its time limit passed); it was interrupted"
        ).to_dict(),
    )


def _cancelled() -> RunResult:
    return RunResult(ok=False, error=ExecutionCancelledError("the execution was cancelled").to_dict())
