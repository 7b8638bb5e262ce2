"""The runtime registry: which servers and workers are alive, in the KV bucket ``noetl_runtime``.

Each process writes ``<role>.<id>`` every few seconds; the bucket's TTL removes an entry whose
writer stopped writing, so a worker that was killed (no chance to deregister) leaves the list by
itself. Nothing decides anything from this registry: it is for people (``noetl workers``,
``GET /api/runtime``) and dashboards, which is why a missed heartbeat is only logged.

The bucket is read and written through the bus port (``noetl.events.port.KeyValue``), so the
registry works on the in-memory twin as well; only its creation on NATS is NATS's own (a memory
bucket, never created by a reader: see ``_bucket``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import socket
import uuid
from collections.abc import Callable
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import NotFoundError
from nats.js.kv import KeyValue as NatsKeyValue

from noetl.events.clock import utc_now
from noetl.events.port import Bus, KeyValue

log = logging.getLogger("noetl.runtime")

RUNTIME_BUCKET = "noetl_runtime"
DEFAULT_TTL = 15.0  # seconds without a heartbeat before an entry disappears
DEFAULT_INTERVAL = 5.0
_UNSAFE = re.compile(r"[^-_=a-zA-Z0-9]")


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel a background loop and wait until it is gone; its own failure does not matter then."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("noetl-jetstream")
    except PackageNotFoundError:
        return "unknown"


def process_id() -> str:
    """Host, pid and a random suffix, made KV-key safe (a dotted host name would add key levels)."""
    return _UNSAFE.sub("-", f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}")


async def ensure_runtime_bucket(js: JetStreamContext, ttl: float = DEFAULT_TTL) -> NatsKeyValue:
    """Open the bucket, creating it with ``ttl`` when missing; an existing bucket keeps its TTL."""
    from noetl.events.streams import ensure_kv

    return await ensure_kv(js, RUNTIME_BUCKET, ttl=ttl, memory=True)


async def _bucket(bus: Bus, *, ttl: float | None = None, create: bool = False) -> KeyValue | None:
    """The bucket as the port's key-value; None on NATS when it does not exist and ``create`` is
    false. On NATS it is created in memory (heartbeats need no disk) by a registrar only: a bucket
    a reader created would have no TTL, and dead processes would stay listed for ever. The twin's
    bucket takes the registrar's ``ttl``."""
    js = getattr(bus, "js", None)
    if js is None:
        return await bus.kv(RUNTIME_BUCKET, ttl=ttl)
    if create:
        await ensure_runtime_bucket(js, ttl or DEFAULT_TTL)
    else:
        try:
            await js.key_value(RUNTIME_BUCKET)
        except NotFoundError:
            return None
    return await bus.kv(RUNTIME_BUCKET)


class RuntimeRegistrar:
    """Keeps one process's entry fresh; ``info_fn`` is read at every beat, so counts stay current."""

    def __init__(
        self,
        bus: Bus,
        role: str,
        info_fn: Callable[[], dict[str, Any]],
        *,
        id: str | None = None,
        interval: float = DEFAULT_INTERVAL,
        ttl: float = DEFAULT_TTL,
    ) -> None:
        if interval >= ttl:
            raise ValueError(f"heartbeat interval {interval} s must be shorter than the TTL {ttl} s")
        self.bus = bus
        self.role, self.info_fn = role, info_fn
        self.id = _UNSAFE.sub("-", id) if id else process_id()
        self.key = f"{role}.{self.id}"
        self.interval, self.ttl = interval, ttl
        self.started_at = utc_now()
        self._kv: KeyValue | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopped = False

    def entry(self) -> dict[str, Any]:
        info = {
            "role": self.role,
            "id": self.id,
            "pool": None,
            "concurrency": None,
            "running": 0,
            "version": package_version(),
            "started_at": self.started_at,
            "host": socket.gethostname(),
        }
        info.update(self.info_fn())
        info["heartbeat_at"] = utc_now()
        return info

    async def beat(self) -> None:
        assert self._kv is not None, "start() first"
        await self._kv.put(self.key, json.dumps(self.entry(), default=str).encode())

    async def start(self) -> None:
        from noetl.events.retry import retrying

        # a bucket just created on a cluster has no leader for a moment: wait it out, do not exit
        self._kv = await retrying(lambda: _bucket(self.bus, ttl=self.ttl, create=True), "runtime bucket")
        await retrying(self.beat, "first runtime heartbeat")
        self._task = asyncio.create_task(self._loop(), name=f"noetl-runtime-{self.key}")

    async def _loop(self) -> None:
        # a flag as well as the cancel: Python 3.11's wait_for (inside nats-py's request) can swallow
        # a cancellation that lands as its reply arrives, and the loop would then beat forever
        while not self._stopped:
            await asyncio.sleep(self.interval)
            try:
                await self.beat()
            except Exception as e:  # a NATS blip: the next beat (or the TTL) settles it
                log.warning("runtime heartbeat for %s failed: %s", self.key, e)

    async def stop(self, *, deregister: bool = True) -> None:
        """Stop beating; ``deregister=False`` leaves the entry to expire, as a killed process would."""
        self._stopped = True
        await cancel_and_wait(self._task)
        self._task = None
        if deregister and self._kv is not None:
            with contextlib.suppress(Exception):
                await self._kv.delete(self.key)


async def list_runtime(bus: Bus, role: str | None = None) -> list[dict[str, Any]]:
    """The live entries, sorted by role and id; an entry that expires while we read is skipped."""
    kv = await _bucket(bus)
    if kv is None:
        return []
    out = []
    for key in await kv.keys(f"{role}." if role is not None else ""):
        e = await kv.get(key)
        if e is not None and e.value:
            with contextlib.suppress(ValueError):
                out.append(json.loads(e.value))
    return sorted(out, key=lambda x: (str(x.get("role")), str(x.get("id"))))
