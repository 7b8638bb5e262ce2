"""Reading values that travel by reference (``{store: nats.object, key, size, checksum}``).

Reads go through the bus port's object store; over NATS that reads with ``writeinto`` (nats-py's
plain object-store ``get`` is quadratic in the object's size, ENVIRONMENT.md).
"""

from __future__ import annotations

import hashlib
from typing import Any

from noetl.events import subjects as s
from noetl.events.envelope import loads
from noetl.events.port import Bus
from noetl.events.refs import is_reference

__all__ = ["expand", "is_reference", "resolve"]


async def resolve(bus: Bus, ref: dict[str, Any]) -> Any:
    """The value behind a reference, checked against its checksum: a corrupted object must not
    pass for the value."""
    data = await (await bus.objects(s.RESULTS_BUCKET)).get(ref["key"])
    if data is None:
        raise LookupError(f"object {ref['key']} is not in {s.RESULTS_BUCKET}")
    return _checked(ref, data)


def _checked(ref: dict[str, Any], data: bytes) -> Any:
    want = ref.get("checksum")
    if want and want != "sha256:" + hashlib.sha256(data).hexdigest():
        raise ValueError(f"object {ref['key']} does not match its checksum {want}")
    return loads(data)


async def expand(bus: Bus, event: dict[str, Any]) -> dict[str, Any]:
    """The event with its whole payload where the engine sent it by reference (``payload_ref``,
    a payload over the event limit, with a summary inline); the summary stays if the object
    cannot be read (it says how the execution ended all the same)."""
    payload = event.get("payload")
    if not isinstance(payload, dict) or not isinstance(payload.get("payload_ref"), dict):
        return event
    try:
        full = await resolve(bus, payload["payload_ref"])
    except Exception:
        return event
    return {**event, "payload": full} if isinstance(full, dict) else event
