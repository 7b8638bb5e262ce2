"""The events of one command, and its terminal event, whose ack confirms the rest.

A run's events before its terminal one (``step.started``, ``task.*``) are for people and tools,
not for the engine: they are collected and go out with the terminal event, one stored message
for a short run (``noetl.events.batches``), and are confirmed with it
(``noetl.events.outbox``). Event ids derive from the command id, so a command that runs again
after a worker died publishes the same ids and JetStream keeps the first of each.

A command that never runs (its credentials cannot be read, it was delivered too often) still
ends with a terminal event: this class alone, without the pipeline ``CommandRun`` adds to it.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.errors import PayloadTooLargeError
from noetl.events import vocabulary as vocab
from noetl.events.batches import BatchingOutbox
from noetl.events.envelope import Command, EntityType, Event, EventName, Status
from noetl.events.ids import derive_id
from noetl.events.masking import Masker
from noetl.events.port import EventOutbox
from noetl.events.retry import is_transient, retrying
from noetl.events.writer import PayloadLimit
from noetl.worker.lifecycle import RunContext

# JetStream refuses messages over 1 MiB; leave room for the envelope
MAX_TERMINAL_BYTES = 900 * 1024
NO_SECRETS = Masker()  # a playbook without a keychain masks nothing: no masker per command


class CommandEvents:
    def __init__(
        self, ctx: RunContext, cmd: Command, masker: Masker = NO_SECRETS, outbox: EventOutbox | None = None
    ) -> None:
        """``outbox``: shared by the iterations of an ``exec: local`` loop, which confirms it in
        batches; a command of its own confirms its events with its terminal event. ``masker``
        hides the keychain's values in the events before the terminal one (whose payload the run
        masks as it builds it)."""
        self.ctx, self.cmd, self.masker = ctx, cmd, masker
        self.cid, self.index = cmd["command_id"], cmd.get("index")
        self.shared = outbox is not None
        # a run of its own: its events go out with its terminal event, in one message when the
        # run is short (noetl.events.batches; a long task's start still shows within 20 ms)
        self.writer = ctx.writer(cmd, outbox or BatchingOutbox(ctx.outbox(), cmd["step"]))

    async def event(
        self,
        name: EventName,
        entity_type: EntityType,
        entity_id: str,
        status: Status,
        payload: dict[str, Any],
        eid: str,
        task_run_id: str | None = None,
    ) -> None:
        """Sent now (followers see a long task start), confirmed with the terminal event."""
        ev = self.writer.build(
            event_id=eid,
            name=name,
            entity_type=entity_type,
            entity_id=entity_id,
            status=status,
            payload=self.masker.mask(payload),
            task_run_id=task_run_id,
        )
        await self.writer.send(ev)

    async def terminal(self, ok: bool, payload: dict[str, Any], *, confirm: bool = True) -> None:
        """The terminal event; its ack also confirms the run's earlier events. ``confirm=False``:
        the caller confirms later (an ``exec: local`` loop, in batches)."""
        name: EventName
        entity: EntityType
        if self.index is None:
            name, entity = (vocab.STEP_DONE if ok else vocab.STEP_FAILED), "step"
        else:
            name, entity = (vocab.ITERATION_DONE if ok else vocab.ITERATION_FAILED), "loop"
            payload = {**payload, "index": self.index}
        payload["worker"] = self.ctx.worker_id
        ev = self.writer.build(
            event_id=derive_id(self.cid, "terminal"),
            name=name,
            entity_type=entity,
            entity_id=self.cmd["step"],
            status="success" if ok else "error",
            payload=payload,
        )
        limit = PayloadLimit(MAX_TERMINAL_BYTES, self._too_large)
        if not confirm:
            await self.writer.send(ev, limit=limit)
            return
        try:
            await self.writer.send(ev, ack=True, limit=limit)
        except Exception as e:
            if not is_transient(e):
                raise
        # held with in-progress acks meanwhile: the outcome is known, only storing it is left
        await retrying(self.writer.confirm, f"storing the outcome of command {self.cid}")

    def _too_large(self, ev: Event, n_bytes: int) -> Event:
        """The failed twin of a terminal event JetStream could not take: same id, the reason."""
        err = PayloadTooLargeError(
            f"step {self.cmd['step']}: its ctx patches and result take more than {MAX_TERMINAL_BYTES} bytes; "
            "keep large data in task results (they travel by reference) and put only references "
            "or small values in set_ctx"
        )
        twin = ev.copy()
        twin["name"] = vocab.STEP_FAILED if self.index is None else vocab.ITERATION_FAILED
        twin["status"] = "error"
        twin["payload"] = {
            "result": None,
            "error": err.to_dict(),
            "worker": self.ctx.worker_id,
            **({"index": self.index} if self.index is not None else {}),
        }
        return twin

    async def fail(self, error: dict[str, Any]) -> None:
        """A command that cannot run: its terminal event says why."""
        await self.terminal(False, {"result": None, "error": error})
