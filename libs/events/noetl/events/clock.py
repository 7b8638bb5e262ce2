"""The one wall-clock reading the adapters stamp events with (the engine reads none).

``datetime.now(UTC).isoformat()`` costs a few microseconds and every event pays it; this keeps
the date and time to the second from the last call and only formats the microseconds, ~5x less.
The text is RFC 3339 with microseconds and ``+00:00``, which ``datetime.fromisoformat`` reads.
"""

from __future__ import annotations

import time

_second = -1
_prefix = ""


def utc_now() -> str:
    global _second, _prefix
    t = time.time()
    sec = int(t)
    if sec != _second:
        _second, _prefix = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    return f"{_prefix}.{int((t - sec) * 1_000_000):06d}+00:00"
