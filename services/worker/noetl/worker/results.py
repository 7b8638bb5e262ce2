"""Reference-first results (SEMANTICS §11).

A value whose JSON is larger than the payload limit goes to the object store ``noetl_results``
and travels as ``{store, key, size, checksum}``; events and commands never carry a large body,
and JetStream's 1 MiB message limit is never met.
"""

from __future__ import annotations

from typing import Any

from noetl.events import subjects as s
from noetl.events.envelope import dumps
from noetl.events.objects import resolve
from noetl.events.refs import is_reference, make_reference
from noetl.events.retry import retrying

__all__ = ["externalize", "is_reference", "resolve"]

DEFAULT_LIMIT = 65_536


async def externalize(bus: Any, value: Any, key: str, limit: int = DEFAULT_LIMIT) -> Any:
    """``bus``: the bus port (``noetl.events.port``) whose ``noetl_results`` store takes it."""
    if value is None or isinstance(value, (bool, int, float)) or is_reference(value):
        return value
    data = dumps(value)
    if len(data) <= limit:
        return value

    async def store() -> None:
        obs = await bus.objects(s.RESULTS_BUCKET)
        await obs.put(key, data)

    await retrying(store, f"storing result {key}")  # the same key again: the object is replaced whole
    return make_reference(key, data)
