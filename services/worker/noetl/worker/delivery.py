"""What the worker does with a delivered command message, around its run: the slot it takes, the
lease that keeps it (in-progress acks), and whether a redelivery of it already ran here.

The lease (NOETL_ACK_WAIT, default 30 s): a command not acked or touched within it goes to another
worker. A command is acked only after its terminal event is stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from noetl.events.port import Delivery

# command ids this worker finished, so a redelivery of one (its ack lost to a pause) is not run again
_DONE_KEEP = 10_000


class Slots:
    """At most ``concurrency`` commands run at once; the pull waits for a free slot."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.running: set[asyncio.Task[None]] = set()
        self._freed: asyncio.Future[None] | None = None

    @property
    def busy(self) -> int:
        return len(self.running)

    @property
    def free(self) -> int:
        return self.concurrency - len(self.running)

    async def freed(self) -> None:
        """Until a running command ends."""
        self._freed = asyncio.get_running_loop().create_future()
        await self._freed

    def take(self, task: asyncio.Task[None]) -> None:
        self.running.add(task)
        task.add_done_callback(self._release)

    def _release(self, task: asyncio.Task[None]) -> None:
        self.running.discard(task)
        if self._freed is not None and not self._freed.done():
            self._freed.set_result(None)


class Leases:
    """One ticker for every running command instead of a timer each: in-progress acks."""

    def __init__(self, ack_wait: float) -> None:
        self.ack_wait = ack_wait
        self.active = True  # until the worker has drained its running commands
        self._held: dict[int, Delivery] = {}  # messages of running commands by id

    def hold(self, msg: Delivery) -> None:
        self._held[id(msg)] = msg

    def release(self, msg: Delivery) -> None:
        self._held.pop(id(msg), None)

    async def loop(self) -> None:
        while self.active:  # a flag, not only the cancel: see RuntimeRegistrar._loop
            await asyncio.sleep(self.ack_wait / 3)
            for msg in list(self._held.values()):
                with contextlib.suppress(Exception):
                    await msg.in_progress()


class Redeliveries:
    """Commands running here now and finished here, so a redelivery of one is not run twice."""

    def __init__(self) -> None:
        self._active: dict[str, asyncio.Future[None]] = {}
        self._finished_here: dict[str, None] = {}  # oldest first

    async def ran_here(self, command_id: str) -> bool:
        """A redelivered command this worker runs right now or has finished: a pause of the whole
        process (a GC pause, a VM stall) outlasted the ack wait, and JetStream handed the command
        back while its first run went on. Running it again would repeat its tool's effect, so
        the redelivery waits for the first run (held with in-progress acks) and is only acked;
        True when that run stored the terminal event, False when it failed (run it again)."""
        first = self._active.get(command_id)
        if first is not None:
            await asyncio.shield(first)
        return command_id in self._finished_here

    @contextlib.contextmanager
    def running(self, command_id: str) -> Iterator[None]:
        """While the command runs here: a redelivery of it waits for the end of this run."""
        self._active[command_id] = asyncio.get_running_loop().create_future()
        try:
            yield
        finally:
            self._active.pop(command_id).set_result(None)

    def finished(self, command_id: str) -> None:
        """The command's terminal event is stored and its message acked."""
        self._finished_here[command_id] = None
        while len(self._finished_here) > _DONE_KEEP:
            del self._finished_here[next(iter(self._finished_here))]
