"""The NATS adapter's handles behind ``NatsBus``: the outbox, an ordered reader, a work queue and
its deliveries, a key-value bucket and an object store, each operation translated to the port's
errors (``nats_errors.ported``). Part of the adapter (docs/architecture.md, "The port").
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from typing import TYPE_CHECKING, Any

from nats.aio.client import Client as NATS
from nats.js.errors import (
    APIError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NotFoundError,
    ObjectNotFoundError,
)

from noetl.events.nats_errors import never_storable, ported
from noetl.events.outbox import Outbox
from noetl.events.port import (
    BusRefusedError,
    Delivery,
    Entry,
    KeyExistsError,
    Message,
    ReaderLostError,
    RevisionMismatchError,
)
from noetl.events.puller import Puller, PullRefusedError, ack_stored, consumer_sequence
from noetl.events.retry import is_transient
from noetl.events.subjects import consumer_delete_subject, kv_subject

if TYPE_CHECKING:
    from noetl.events.nats_port import NatsBus

log = logging.getLogger("noetl.events")


# an idle reader asks this often whether its consumer still exists (its node may be gone)
_READER_CHECK_EVERY = 3.0


def _stamp(m: Any) -> float:
    ts = getattr(getattr(m, "metadata", None), "timestamp", None)
    return ts.timestamp() if ts is not None else 0.0


def _message(m: Any) -> Message:
    return Message(m.subject, m.data, m.metadata.sequence.stream, dict(m.headers or {}) or None, _stamp(m))


class _NatsOutbox:
    """``Outbox`` with the port's errors: a message JetStream can never store is ``BusRefusedError``."""

    def __init__(self, outbox: Outbox) -> None:
        self._outbox = outbox

    @ported
    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        try:
            await self._outbox.send(subject, data, msg_id, ack=ack)
        except Exception as e:
            if never_storable(e):
                raise BusRefusedError(f"{subject}: {e}") from e
            raise

    @ported
    async def confirm(self) -> None:
        try:
            await self._outbox.confirm()
        except Exception as e:
            if never_storable(e):
                raise BusRefusedError(str(e)) from e
            raise


class _NatsReader:
    def __init__(self, bus: NatsBus, stream: str, name: str, puller: Puller) -> None:
        self._bus, self._stream, self._name, self._puller = bus, stream, name, puller
        self._expected = 1  # the next consumer sequence: any other is a message lost on the way
        self._gap = False
        self._idle_since: float | None = None

    @ported
    async def fetch(self, batch: int, timeout: float) -> list[Message]:
        if self._gap:
            raise ReaderLostError(f"{self._stream}: a message lost on the way to reader {self._name}")
        loop = asyncio.get_running_loop()
        try:
            msgs = await self._puller.fetch(batch, wait=timeout)
        except PullRefusedError as e:  # its consumer deleted, its pull refused: this reader is done
            raise ReaderLostError(f"{self._stream}: reader {self._name}: {e}") from e
        if not msgs:
            self._idle_since = self._idle_since or loop.time()
            if loop.time() - self._idle_since >= _READER_CHECK_EVERY:
                self._idle_since = loop.time()
                try:
                    await self._bus.js.consumer_info(self._stream, self._name, timeout=2.0)
                except NotFoundError as e:
                    raise ReaderLostError(f"{self._stream}: reader {self._name} is gone") from e
                except Exception as e:
                    if not is_transient(e):
                        raise
            return []
        self._idle_since = None
        out = []
        for m in msgs:
            if consumer_sequence(m) != self._expected:
                self._gap = True  # never past a gap: what came before it is handed over first
                break
            self._expected += 1
            out.append(_message(m))
        if not out:
            raise ReaderLostError(f"{self._stream}: a message lost on the way to reader {self._name}")
        return out

    @ported
    async def close(self) -> None:
        await self._puller.stop()
        with contextlib.suppress(Exception):
            await self._bus.nc.publish(consumer_delete_subject(self._stream, self._name), b"")


class _NatsDelivery:
    def __init__(self, msg: Any) -> None:
        self._msg = msg
        self.subject, self.data = msg.subject, msg.data
        self.seq = msg.metadata.sequence.stream
        self.delivered = msg.metadata.num_delivered
        self.headers = dict(msg.headers or {}) or None
        self.stamp = _stamp(msg)

    @property
    def msg_id(self) -> str | None:
        return (self.headers or {}).get("Nats-Msg-Id")

    @ported
    async def ack(self) -> None:
        """Acknowledged and confirmed (elections and reconnects waited out, ``ack_stored``)."""
        await ack_stored(self._msg, f"acknowledging message {self.seq}")

    @ported
    async def nak(self, delay: float = 0.0) -> None:
        await self._msg.nak(delay=delay or None)

    @ported
    async def in_progress(self) -> None:
        await self._msg.in_progress()

    @ported
    async def term(self) -> None:
        await self._msg.term()


class _NatsQueue:
    def __init__(self, puller: Puller) -> None:
        self._puller = puller

    @ported
    async def fetch(self, batch: int, timeout: float) -> list[Delivery]:
        return [_NatsDelivery(m) for m in await self._puller.fetch(batch, wait=max(timeout, 0.01))]

    @ported
    async def close(self, *, nak: bool = True) -> None:
        await self._puller.stop(nak=nak)


class _NatsKeyValue:
    def __init__(self, kv: Any, nc: NATS | None = None, bucket: str = "", js: Any = None) -> None:
        self._kv, self._nc, self._bucket, self._js = kv, nc, bucket, js

    @ported
    async def get(self, key: str) -> Entry | None:
        try:
            e = await self._kv.get(key)
        except KeyNotFoundError:
            return None
        return Entry(key, e.value or b"", e.revision or 0)

    @ported
    async def put(self, key: str, value: bytes) -> int:
        return int(await self._kv.put(key, value))

    @ported
    async def create(self, key: str, value: bytes) -> int:
        try:
            return int(await self._kv.create(key, value))
        except (KeyWrongLastSequenceError, KeyNotFoundError) as e:
            # refused; nats-py then reads the key back, which a node that has not applied the
            # other writer's create yet answers with "not found": it exists all the same
            raise KeyExistsError(f"key {key} exists") from e

    @ported
    async def update(self, key: str, value: bytes, last: int) -> int:
        try:
            return int(await self._kv.update(key, value, last=last))
        except KeyWrongLastSequenceError as e:
            raise RevisionMismatchError(f"key {key}: revision {last} is not the last one") from e

    @ported
    async def delete(self, key: str, *, last: int | None = None) -> None:
        if last is None:
            with contextlib.suppress(KeyNotFoundError):
                await self._kv.purge(key)  # every revision: a deleted value must not stay in history
            return
        # a purge (every revision gone) only while ``last`` is the key's last revision
        headers = {
            "KV-Operation": "PURGE",
            "Nats-Rollup": "sub",
            "Nats-Expected-Last-Subject-Sequence": str(last),
        }
        try:
            await self._js.publish(kv_subject(self._bucket, key), b"", headers=headers)
        except APIError as e:
            if e.err_code in (10071, 10164):
                raise RevisionMismatchError(f"key {key}: revision {last} is not the last one") from e
            raise

    @ported
    async def purge(self, pattern: str) -> None:
        await self._js.purge_stream(f"KV_{self._bucket}", subject=kv_subject(self._bucket, pattern))

    @ported
    async def ttl(self) -> float | None:
        info = await self._js.stream_info(f"KV_{self._bucket}")
        return info.config.max_age or None

    @ported
    async def put_nowait(self, key: str, value: bytes) -> None:
        # a KV put is a publish to $KV.<bucket>.<key>; without a reply nobody waits for it
        assert self._nc is not None
        await self._nc.publish(kv_subject(self._bucket, key), value)

    @ported
    async def keys(self, prefix: str = "") -> list[str]:
        """Every key with ``prefix``. nats-py's ``keys()`` can answer "no keys" for a bucket that has
        some: its watcher marks the end of the initial values when the consumer reports nothing
        pending and its callback has not yet taken the first message, which a busy process loses
        (seen as an empty catalog listing under load). An empty answer from a bucket whose stream
        holds messages is therefore asked again; only delete markers left is a true empty."""
        for _ in range(3):
            try:
                keys = await self._kv.keys()
            except Exception as e:  # nats-py raises NoKeysError for an empty bucket
                if type(e).__name__ != "NoKeysError":
                    raise
                keys = []
            if keys or not (await self._kv.status()).values:
                break
            await asyncio.sleep(0.05)
        return sorted(k for k in keys if k.startswith(prefix))


class _NatsObjects:
    def __init__(self, store: Any) -> None:
        self._store = store

    @ported
    async def put(self, name: str, data: bytes) -> None:
        await self._store.put(name, data)

    @ported
    async def get(self, name: str) -> bytes | None:
        buf = io.BytesIO()  # writeinto: nats-py's plain get is quadratic in the object's size
        try:
            await self._store.get(name, writeinto=buf)
        except (ObjectNotFoundError, NotFoundError):
            return None
        return buf.getvalue()
