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


def later(ts: str | None, seconds: float) -> str | None:
    """``ts`` (RFC 3339) plus ``seconds``, in UTC; None when ``ts`` is not a zoned timestamp.

    Arithmetic on a given time, no reading of the clock: the engine computes due times with it
    from the timestamp of the event it decides on, so replay computes the same ones."""
    from datetime import datetime, timedelta

    try:
        base = datetime.fromisoformat(str(ts).replace("Z", "+00:00"))
    except ValueError:
        return None
    if base.tzinfo is None:
        return None
    return (base + timedelta(seconds=float(seconds))).isoformat()


def not_after(a: str, b: str) -> bool:
    """Whether RFC 3339 time ``a`` is at or before ``b`` (False when either does not parse)."""
    from datetime import datetime

    try:
        first = datetime.fromisoformat(a.replace("Z", "+00:00"))
        return first <= datetime.fromisoformat(b.replace("Z", "+00:00"))
    except (ValueError, TypeError):
        return False
