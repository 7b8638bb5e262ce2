"""Reading values that travel by reference (``{store: nats.object, key, size, checksum}``).

Reads go through ``get(..., writeinto=...)``: nats-py's plain object-store ``get`` is quadratic
in the object's size (ENVIRONMENT.md).
"""

from __future__ import annotations

import hashlib
import io
from typing import Any

from nats.js import JetStreamContext

from noetl.events import subjects as s
from noetl.events.envelope import loads
from noetl.events.refs import is_reference

__all__ = ["is_reference", "resolve", "resolve_on"]


async def resolve(js: JetStreamContext, ref: dict[str, Any]) -> Any:
    """The value behind a reference, checked against its checksum."""
    obs = await js.object_store(s.RESULTS_BUCKET)
    buf = io.BytesIO()
    await obs.get(ref["key"], writeinto=buf)
    return _checked(ref, buf.getvalue())


async def resolve_on(bus: Any, ref: dict[str, Any]) -> Any:
    """``resolve`` through a bus port (``noetl.events.port``)."""
    data = await (await bus.objects(s.RESULTS_BUCKET)).get(ref["key"])
    if data is None:
        raise LookupError(f"object {ref['key']} is not in {s.RESULTS_BUCKET}")
    return _checked(ref, data)


def _checked(ref: dict[str, Any], data: bytes) -> Any:
    want = ref.get("checksum")
    if want and want != "sha256:" + hashlib.sha256(data).hexdigest():
        raise ValueError(f"object {ref['key']} does not match its checksum {want}")
    return loads(data)
