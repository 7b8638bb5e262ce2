"""The playbook catalog on the KV bucket ``noetl_catalog``.

Two kinds of keys: ``path.<path>.<version>`` (what users register and request by path) and
``digest.<sha256>`` (content-addressed, what commands refer to, so a worker always runs exactly
the text the execution was started with, even after a newer version is registered).
"""

from __future__ import annotations

import json
from typing import Any

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from noetl.dsl import load_playbook
from noetl.dsl.cache import digest_of
from noetl.events import subjects as s


class Catalog:
    def __init__(self, kv: Any) -> None:
        self.kv = kv
        self._known: set[str] = set()

    @classmethod
    async def open(cls, js: JetStreamContext) -> Catalog:
        return cls(await js.key_value(s.CATALOG_BUCKET))

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
        key = s.catalog_digest_key(digest)
        try:
            await self.kv.get(key)
        except KeyNotFoundError:
            await self.kv.put(key, text.encode())
        self._known.add(digest)   # content-addressed: once stored, never changes

    async def get_by_digest(self, digest: str) -> str | None:
        try:
            e = await self.kv.get(s.catalog_digest_key(digest))
        except KeyNotFoundError:
            return None
        return e.value.decode() if e.value is not None else None

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
