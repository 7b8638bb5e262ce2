"""The playbook catalog on the KV bucket ``noetl_catalog``.

Two kinds of keys: ``path.<path>.<version>`` (what users register and request by path) and
``digest.<sha256>`` (content-addressed, what commands refer to, so a worker always runs exactly
the text the execution was started with, even after a newer version is registered).

A text too large for one KV value (a KV value is one JetStream message, at most 1 MiB) is kept
in the object store ``noetl_catalog`` under its digest instead; its ``path.*`` entries stay in
KV like any other.
"""

from __future__ import annotations

import io
import json
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from noetl.dsl import load_playbook
from noetl.dsl.cache import digest_of
from noetl.events import subjects as s
from noetl.events.streams import ensure_object_store

# The body of one JetStream message (a KV value, an event), leaving room in NATS's 1 MiB limit
# for the subject and headers.
MAX_MESSAGE_BYTES = 1_000_000


class Catalog:
    def __init__(self, kv: Any, js: JetStreamContext) -> None:
        self.kv, self.js = kv, js
        self._objects: ObjectStore | None = None
        self._known: set[str] = set()

    @classmethod
    async def open(cls, js: JetStreamContext) -> Catalog:
        return cls(await js.key_value(s.CATALOG_BUCKET), js)

    async def _object_store(self) -> ObjectStore:
        """Opened on first use, and created if missing (services that predate it)."""
        if self._objects is None:
            self._objects = await ensure_object_store(self.js, s.CATALOG_OBJECT_BUCKET)
        return self._objects

    async def register(self, text: str, file: str = "<playbook>") -> dict[str, Any]:
        """Validate and store a playbook under its path, its version and ``latest``."""
        pb = load_playbook(text, file)
        path = pb.metadata.path or pb.metadata.name
        digest = digest_of(text)
        await self.put_digest(digest, text)
        entry = json.dumps(
            {"path": path, "version": pb.metadata.version, "digest": digest, "name": pb.metadata.name}
        ).encode()
        if pb.metadata.version:
            await self.kv.put(s.catalog_path_key(path, pb.metadata.version), entry)
        await self.kv.put(s.catalog_path_key(path, None), entry)
        return {"path": path, "version": pb.metadata.version, "digest": digest}

    async def put_digest(self, digest: str, text: str) -> None:
        if digest in self._known:
            return
        data = text.encode()
        if len(data) <= MAX_MESSAGE_BYTES:
            key = s.catalog_digest_key(digest)
            try:
                await self.kv.get(key)
            except KeyNotFoundError:
                await self.kv.put(key, data)
        else:
            objects = await self._object_store()
            try:
                await objects.get_info(digest)
            except ObjectNotFoundError:
                await objects.put(digest, data)
        self._known.add(digest)   # content-addressed: once stored, never changes

    async def get_by_digest(self, digest: str) -> str | None:
        try:
            e = await self.kv.get(s.catalog_digest_key(digest))
            return e.value.decode() if e.value is not None else None
        except KeyNotFoundError:
            pass
        buf = io.BytesIO()  # writeinto: nats-py's plain get is quadratic in the object's size
        try:
            await (await self._object_store()).get(digest, writeinto=buf)
        except ObjectNotFoundError:
            return None
        return buf.getvalue().decode()

    async def with_playbook_text(self, event: dict[str, Any]) -> dict[str, Any]:
        """A ``playbook.execution.requested`` event as the engine reads it: with its playbook's text.

        The event carries the text itself unless that would not fit in one message; then it
        names the text by ``digest`` only, and the catalog, content-addressed and written before
        the event, gives it back. Every other event is returned as it is.
        """
        payload = event.get("payload") or {}
        if event.get("name") != "playbook.execution.requested" or "playbook" in payload:
            return event
        digest = str(payload.get("digest"))
        text = await self.get_by_digest(digest)
        if text is None:
            raise LookupError(
                f"playbook {digest} of execution {event.get('execution_id')} is not in the catalog "
                f"(bucket {s.CATALOG_BUCKET}): it was written there before the request was accepted"
            )
        return {**event, "payload": {**payload, "playbook": text}}

    async def get(self, path: str, version: str | None = None) -> str | None:
        try:
            e = await self.kv.get(s.catalog_path_key(path, version))
        except KeyNotFoundError:
            return None
        if not e.value:
            return None
        return await self.get_by_digest(json.loads(e.value)["digest"])

    async def list(self) -> list[dict[str, Any]]:
        try:
            keys = await self.kv.keys()
        except Exception:  # nats-py raises NoKeysError on an empty bucket
            return []
        seen: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        for k in keys:
            if k.startswith("path."):
                e = await self.kv.get(k)
                if e.value:
                    entry = json.loads(e.value)
                    # `latest` repeats a versioned entry; an unversioned playbook has only `latest`
                    seen.setdefault((entry["path"], entry.get("version"), entry["digest"]), entry)
        return sorted(seen.values(), key=lambda x: (x["path"], str(x.get("version"))))
