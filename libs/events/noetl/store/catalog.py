"""The playbook catalog on the KV bucket ``noetl_catalog``.

Two kinds of keys: ``path.<path>.<version>`` (what users register and request by path) and
``digest.<sha256>`` (content-addressed, what commands refer to, so a worker always runs exactly
the text the execution was started with, even after a newer version is registered).

A text too large for one KV value (a KV value is one JetStream message, at most 1 MiB) is kept
in the object store ``noetl_catalog`` under its digest instead; its ``path.*`` entries stay in
KV like any other.
"""

from __future__ import annotations

import json
from typing import Any

from noetl.dsl import load_playbook
from noetl.dsl.cache import digest_of
from noetl.dsl.errors import CatalogConflictError, ForbiddenError
from noetl.events import subjects as s
from noetl.events.clock import utc_now
from noetl.events.envelope import Event
from noetl.events.objects import resolve
from noetl.events.port import Bus, KeyExistsError, KeyValue, ObjectStore
from noetl.events.refs import is_reference
from noetl.store.principals import Principal, namespace_of

# The body of one JetStream message (a KV value, an event), leaving room in NATS's 1 MiB limit
# for the subject and headers.
MAX_MESSAGE_BYTES = 1_000_000


# the largest object loop.in may reference: its items are held in the server's memory
MAX_LOOP_ITEMS_BYTES = 256 << 20


class Catalog:
    """On the bus port (``noetl.events.port``): the same catalog over NATS or in memory."""

    def __init__(self, kv: KeyValue, bus: Bus) -> None:
        self.kv, self.bus = kv, bus
        self._objects: ObjectStore | None = None
        self._known: set[str] = set()

    @classmethod
    async def open(cls, bus: Bus) -> Catalog:
        return cls(await bus.kv(s.CATALOG_BUCKET), bus)

    async def _object_store(self) -> ObjectStore:
        """Opened on first use, and created if missing (services that predate it)."""
        if self._objects is None:
            self._objects = await self.bus.objects(s.CATALOG_OBJECT_BUCKET)
        return self._objects

    async def register(
        self,
        text: str,
        file: str = "<playbook>",
        principal: Principal | None = None,
        *,
        writer: str | None = None,
    ) -> dict[str, Any]:
        """Validate and store a playbook under its path, its version and ``latest``.

        Append-only: a version once written keeps its text forever (registering the same text
        again answers the stored entry; other text is a ``CatalogConflictError``), because a
        credential scope and every admin who reviewed that version trust exactly that text. Each
        entry records its digest and who wrote it. With ``principal`` the write is refused
        (``ForbiddenError``) unless the principal may write the path's namespace. ``writer``
        names a writer that is no principal (the ``noetl`` CLI on NATS: its NATS user).
        """
        pb = load_playbook(text, file)
        path = pb.metadata.path or pb.metadata.name
        version = pb.metadata.version
        if principal is not None and not principal.may("write", namespace_of(path)):
            raise ForbiddenError(
                f"principal {principal.name!r} ({principal.role}) may not register playbooks in namespace "
                f"{namespace_of(path)!r} (path {path!r})"
            )
        digest = digest_of(text)
        await self.put_digest(digest, text)
        who = principal.record() if principal is not None else (
            {"name": writer, "role": "nats"} if writer else None
        )
        record = {"path": path, "version": version, "digest": digest, "name": pb.metadata.name,
                  "principal": who, "registered_at": utc_now()}
        entry = json.dumps(record).encode()
        if version:
            key = s.catalog_path_key(path, version)
            try:
                await self.kv.create(key, entry)
            except KeyExistsError:
                current = await self.kv.get(key)
                stored = json.loads(current.value) if current is not None and current.value else {}
                if stored.get("digest") != digest:
                    raise CatalogConflictError(
                        f"{path!r} version {version!r} is already registered with other text "
                        f"(digest {str(stored.get('digest'))[:12]}…): a version is never replaced; give the "
                        "changed playbook a new metadata.version", path=path, version=version,
                    ) from None
                who = stored.get("principal")
                return {"path": path, "version": version, "digest": digest, "principal": who}
        await self.kv.put(s.catalog_path_key(path, None), entry)
        return {"path": path, "version": version, "digest": digest, "principal": who}

    async def entry(self, path: str, version: str | None = None) -> dict[str, Any] | None:
        """The stored entry ``{path, version, digest, name, principal, registered_at}``, or None."""
        e = await self.kv.get(s.catalog_path_key(path, version))
        if e is None or not e.value:
            return None
        stored: dict[str, Any] = json.loads(e.value)
        return stored

    async def put_digest(self, digest: str, text: str) -> None:
        if digest in self._known:
            return
        data = text.encode()
        if len(data) <= MAX_MESSAGE_BYTES:
            key = s.catalog_digest_key(digest)
            if await self.kv.get(key) is None:
                await self.kv.put(key, data)
        else:
            objects = await self._object_store()
            if await objects.get(digest) is None:
                await objects.put(digest, data)
        self._known.add(digest)   # content-addressed: once stored, never changes

    async def get_by_digest(self, digest: str) -> str | None:
        e = await self.kv.get(s.catalog_digest_key(digest))
        if e is not None:
            return e.value.decode()
        data = await (await self._object_store()).get(digest)
        return None if data is None else data.decode()

    async def with_playbook_text(self, event: Event) -> Event:
        """An input as the engine reads it: a ``playbook.execution.requested`` event with its
        playbook's text, a ``loop.items.read`` with the value of its reference (``items``).

        The request carries the text itself unless that would not fit in one message; then it
        names the text by ``digest`` only, and the catalog, content-addressed and written before
        the event, gives it back. A ``loop.items.read`` names a result in the object store, which
        is written before the event that refers to it and never changes, so a rebuild reads the
        same items. Every other event is returned as it is.
        """
        if event.get("name") == "loop.items.read":
            return await self._with_loop_items(event)
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

    async def _with_loop_items(self, event: Event) -> Event:
        """An object that is gone or corrupt is the engine's to report (the step fails, naming
        it); a bus that does not answer raises, so the caller waits it out and reads again."""
        payload = event.get("payload") or {}
        if "items" in payload or not is_reference(payload.get("ref")):
            return event
        if not payload["ref"].get("checksum"):
            # every reference a step's result travels as carries its checksum; one without is
            # written by hand in the playbook and could name another execution's result
            why = "it has no checksum, so it is not a result this execution stored: loop over a step's result"
            return {**event, "payload": {**payload, "read_error": why}}
        size = payload["ref"].get("size")
        if isinstance(size, int) and size > MAX_LOOP_ITEMS_BYTES:
            why = (
                f"it is {size} bytes and a loop reads at most {MAX_LOOP_ITEMS_BYTES} "
                "(the server holds the items in memory): page the input over several loops"
            )
            return {**event, "payload": {**payload, "read_error": why}}
        try:
            items = await resolve(self.bus, payload["ref"])
        except (LookupError, ValueError) as e:
            return {**event, "payload": {**payload, "read_error": str(e)}}
        return {**event, "payload": {**payload, "items": items}}

    async def get(self, path: str, version: str | None = None) -> str | None:
        entry = await self.entry(path, version)
        if entry is None:
            return None
        return await self.get_by_digest(entry["digest"])

    async def list(self) -> list[dict[str, Any]]:
        seen: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        for k in await self.kv.keys("path."):
            e = await self.kv.get(k)
            if e is not None and e.value:
                entry = json.loads(e.value)
                # `latest` repeats a versioned entry; an unversioned playbook has only `latest`
                seen.setdefault((entry["path"], entry.get("version"), entry["digest"]), entry)
        return sorted(seen.values(), key=lambda x: (x["path"], str(x.get("version"))))
