"""Which server replica decides for which partition: leases in the KV bucket ``noetl_leases``.

Every replica keeps a member key ``member.<id>`` fresh and holds the partitions it owns as keys
``p<N>``, each created with compare-and-set (``create`` succeeds only on an absent key) and renewed
with ``update(last=revision)``. The bucket's TTL removes what a dead replica stopped renewing, so
its partitions come free ``ttl`` seconds after its last renewal and a live replica takes them at
its next tick: a takeover within ``ttl + tick`` seconds.

Spreading: partition ``p`` belongs to the live member at ``p % n`` of the sorted member ids. A
replica releases (stops deciding, deletes the key) what belongs to another and takes what
belongs to it once it is free, so a new replica gets its share within a tick or two and a
stopped one hands its share over at once.

Safety: a replica decides for ``p`` only while ``valid(p)``, that is until ``ttl - margin``
seconds after it *sent* its last successful renewal. JetStream stamps the renewal when it stores
it, later than we sent it, and expires it ``ttl`` after that stamp, so a replica that cannot renew
(cut off, paused, its NATS node gone) stops deciding before the key can expire and be taken. What
it had already decided and is still storing carries deterministic ids: when the new owner decides
the same inputs again, JetStream keeps one copy (tests/service/test_leases.py shows an overlap
is harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from noetl.events import subjects as s
from noetl.events.nats_port import as_bus
from noetl.events.port import KeyExistsError, KeyValue, RevisionMismatchError
from noetl.events.retry import describe, is_transient, retrying
from noetl.events.runtime import cancel_and_wait

log = logging.getLogger("noetl.server.leases")

DEFAULT_TTL = 6.0


def lease_ttl() -> float:
    from noetl.events.settings import setting

    return float(setting("lease_ttl"))


class PartitionLeases:
    def __init__(
        self,
        bus: Any,
        member: str,
        partitions: int,
        *,
        on_acquire: Callable[[int], Awaitable[None]],
        on_release: Callable[[int], Awaitable[None]],
        on_hold: Callable[[int], Awaitable[None]] | None = None,
        ttl: float | None = None,
        replicas: int | None = None,
    ) -> None:
        """``on_hold`` is called for every partition still held after each round: the owner makes
        sure whatever it runs for a partition is still running (a lease kept restarts what ended)."""
        self.bus, self.member, self.partitions = as_bus(bus, replicas=replicas), member, partitions
        self.on_acquire, self.on_release, self.on_hold = on_acquire, on_release, on_hold
        self.ttl = self.configured_ttl = ttl if ttl is not None else lease_ttl()
        if self.ttl < 1.0:
            raise ValueError(f"lease TTL {self.ttl} s is too short: use at least 1 s (NOETL_LEASE_TTL)")
        self.tick = min(1.0, self.ttl / 4)
        self._kv: KeyValue | None = None
        self._revision: dict[int, int] = {}
        self._valid_until: dict[int, float] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopped = False
        self.members: list[str] = []
        self.takeovers = 0  # partitions acquired after the start (metrics, tests)

    # --- queries ---------------------------------------------------------------------------

    @property
    def margin(self) -> float:
        """How long before the bucket could expire a lease this replica stops counting on it."""
        return max(0.25, self.ttl * 0.15)

    @property
    def owned(self) -> list[int]:
        return sorted(self._revision)

    def valid(self, partition: int) -> bool:
        """True while this replica may decide for ``partition`` (see the module doc)."""
        until = self._valid_until.get(partition)
        return until is not None and asyncio.get_running_loop().time() < until

    def assigned(self, members: list[str]) -> set[int]:
        if self.member not in members:
            return set()
        i, n = members.index(self.member), len(members)
        return {p for p in range(self.partitions) if p % n == i}

    # --- life cycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Join and take this replica's share before returning, so a lone server decides at once."""
        # the bucket's TTL is what expires a lease, so it is the one that counts: an existing bucket
        # is brought to ours (a changed NOETL_LEASE_TTL), and every round reads it back
        # (``_members``) so a replica never believes in a lease longer than the bucket keeps it
        self._kv = await retrying(
            lambda: self.bus.kv(s.LEASES_BUCKET, ttl=self.configured_ttl), "opening the lease bucket"
        )
        await retrying(lambda: self._round(first=True), "taking partition leases")
        self._task = asyncio.create_task(self._loop(), name=f"noetl-leases-{self.member}")

    async def _stop_renewing(self) -> None:
        self._stopped = True
        await cancel_and_wait(self._task)
        self._task = None

    async def stop(self) -> None:
        """Hand every partition over at once: stop deciding, then delete the keys."""
        await self._stop_renewing()
        revisions = dict(self._revision)
        await asyncio.gather(*(self._release(p, delete=False) for p in revisions))
        if self._kv is None:
            return
        kv = self._kv
        deletes = [kv.delete(f"p{p}", last=rev) for p, rev in revisions.items()]
        with contextlib.suppress(Exception):  # unreleased keys expire after the TTL anyway
            await asyncio.wait_for(asyncio.gather(*deletes, kv.delete(self._member_key())), 2)

    async def crash(self) -> None:
        """Stop renewing without releasing anything, as a killed process would (tests)."""
        await self._stop_renewing()

    # --- the loop --------------------------------------------------------------------------

    def _member_key(self) -> str:
        return f"member.{self.member}"

    def _value(self) -> bytes:
        return json.dumps({"owner": self.member}).encode()

    @property
    def op_timeout(self) -> float:
        """How long one KV request of a round may take. nats-py's own default (5 s) is most of a
        6 s lease: one request to a node that just died used up the lease while the round waited,
        so every partition lapsed at once. Bounded, a round ends in time for the next tick."""
        return max(0.5, self.ttl / 4)

    async def _loop(self) -> None:
        while not self._stopped:
            await asyncio.sleep(self.tick)
            try:
                await self._round()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a NATS blip: validity runs out on its own if it lasts
                (log.info if is_transient(e) else log.exception)("lease round failed: %s", describe(e))
            try:
                await self._expire_unrenewed()
                await self._hold()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("lease bookkeeping failed; the next round tries again")

    async def _hold(self) -> None:
        if self.on_hold is None:
            return
        for p in self.owned:
            if self.valid(p):
                await self.on_hold(p)

    async def _expire_unrenewed(self) -> None:
        """A replica that cannot renew in time cannot decide: it gives the lease up at once (and
        deletes the key if it still can, so another replica need not wait for the bucket's TTL)."""
        for p in self.owned:
            if not self.valid(p):
                log.warning("partition %d: lease not renewed in time; giving it up", p)
                await self._release(p, delete=True)

    async def _kv_op(self, op: Awaitable[Any]) -> Any:
        return await asyncio.wait_for(op, self.op_timeout)

    async def _renew(self, partition: int, sent: float) -> None:
        assert self._kv is not None
        key = f"p{partition}"
        try:
            rev = await self._kv_op(self._kv.update(key, self._value(), last=self._revision[partition]))
        except RevisionMismatchError:
            if await self._adopt(partition):
                return
            log.warning("partition %d: lease lost to another replica", partition)
            await self._release(partition, delete=False)
            return
        except KeyError:  # released meanwhile
            return
        if partition in self._revision:
            self._granted(partition, rev, sent)

    async def _adopt(self, partition: int) -> bool:
        """A write of ours that timed out may have been stored all the same: the key then holds our
        value at a revision we never saw. Renew from that revision instead of waiting for the key to
        expire (the bounded ``op_timeout`` makes such time-outs likelier than nats-py's 5 s did)."""
        assert self._kv is not None
        key = f"p{partition}"
        entry = await self._kv_op(self._kv.get(key))
        if entry is None or entry.value != self._value():
            return False
        sent = asyncio.get_running_loop().time()
        try:
            rev = await self._kv_op(self._kv.update(key, self._value(), last=entry.revision))
        except RevisionMismatchError:
            return False
        self._granted(partition, rev, sent)
        return True

    async def _round(self, *, first: bool = False) -> None:
        assert self._kv is not None
        kv = self._kv
        loop = asyncio.get_running_loop()
        # renewals first and together: each is bounded, none waits behind another or the member key
        sent = loop.time()
        renewals = await asyncio.gather(*(self._renew(p, sent) for p in self.owned), return_exceptions=True)
        failed = [r for r in renewals if isinstance(r, BaseException)]
        await self._kv_op(kv.put(self._member_key(), self._value()))
        if failed:
            raise failed[0]
        members = await self._members()
        if not members:
            return
        self.members = members
        mine = self.assigned(members)
        for p in self.owned:
            if p not in mine:
                log.info("partition %d: handing over (members %s)", p, ", ".join(members))
                await self._release(p, delete=True)
        for p in sorted(mine - set(self.owned)):
            sent = loop.time()
            try:
                rev = await self._kv_op(kv.create(f"p{p}", self._value()))
                self._granted(p, rev, sent)
            except KeyExistsError:  # its owner has not let go yet (next round), or it is ours
                if not await self._adopt(p):
                    continue
            if not first:
                self.takeovers += 1
            log.info("partition %d: acquired", p)
            await self.on_acquire(p)

    def _granted(self, partition: int, revision: int, sent: float) -> None:
        """A write of the lease key succeeded: JetStream stamped it no earlier than ``sent``."""
        self._revision[partition] = revision
        self._valid_until[partition] = sent + self.ttl - self.margin

    async def _members(self) -> list[str]:
        """Live member ids: keys present in the bucket (its TTL drops the dead ones)."""
        assert self._kv is not None
        stored = await self._kv_op(self._kv.ttl())
        if stored:  # another replica may have changed it: never trust more than the bucket keeps
            self.ttl = min(self.configured_ttl, stored)
        prefix = "member."
        out = {k[len(prefix) :] for k in await self._kv_op(self._kv.keys(prefix))}
        out.add(self.member)
        return sorted(out)

    async def _release(self, partition: int, *, delete: bool) -> None:
        rev = self._revision.pop(partition, None)
        self._valid_until.pop(partition, None)
        try:
            await self.on_release(partition)
        except Exception:
            log.exception("partition %d: stopping its loop failed", partition)
        if delete and rev is not None and self._kv is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._kv.delete(f"p{partition}", last=rev), 2)
