"""The reference a large value travels as: ``{store: nats.object, key, size, checksum}``.

Pure (no I/O): the engine computes references while deciding, the worker while publishing; both
must build exactly the same shape, so it is built here once.
"""

from __future__ import annotations

import hashlib
from typing import Any

STORE = "nats.object"


def make_reference(key: str, data: bytes) -> dict[str, Any]:
    """``size`` and ``checksum`` describe the JSON bytes stored under ``key`` (SEMANTICS §11)."""
    return {
        "store": STORE,
        "key": key,
        "size": len(data),
        "checksum": "sha256:" + hashlib.sha256(data).hexdigest(),
    }


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and value.get("store") == STORE and "key" in value
