"""Turning driver values into JSON-safe ones, shared by the SQL kinds.

Task results travel in events and are read by templates, so they must survive a JSON round trip
unchanged: a value the drivers hand back as ``Decimal``, ``datetime`` or ``UUID`` is converted
here once, in the kind, instead of surprising the event encoder later.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import math
import uuid
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from noetl.dsl.errors import ResultNotJsonError as ResultNotJsonError


def json_safe(value: Any) -> Any:
    """A JSON-safe copy of a database value.

    ``Decimal`` → int when integral else float; date/time → ISO 8601; ``timedelta`` → seconds;
    UUID and IP addresses → str; bytes → base64; non-finite numbers → their text (``"NaN"``,
    ``"Infinity"``), since JSON has no literal for them; mappings keep their structure with
    string keys; tuples, sets and other sequences → lists; a range → ``{lower, upper, lower_inc,
    upper_inc, empty}``; anything else → its text.
    """
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _non_finite(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray | memoryview):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, uuid.UUID | ipaddress.IPv4Address | ipaddress.IPv6Address
                  | ipaddress.IPv4Network | ipaddress.IPv6Network
                  | ipaddress.IPv4Interface | ipaddress.IPv6Interface):
        return str(value)
    if isinstance(value, Mapping):
        return {_key(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [json_safe(v) for v in value]
    if hasattr(value, "items") and callable(value.items):  # asyncpg Record of a composite type
        return {_key(k): json_safe(v) for k, v in value.items()}
    if hasattr(value, "lower_inc") and hasattr(value, "isempty"):  # asyncpg Range
        return {"lower": json_safe(value.lower), "upper": json_safe(value.upper),
                "lower_inc": value.lower_inc, "upper_inc": value.upper_inc, "empty": value.isempty}
    return str(value)


def _non_finite(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _key(key: Any) -> str:
    return key if isinstance(key, str) else str(json_safe(key))


def strict_json(value: Any, path: str = "result") -> Any:
    """``value`` with tuples turned into lists, or ``ResultNotJsonError`` naming the first bad part.

    Unlike :func:`json_safe` nothing is guessed: a Python task that returns a ``datetime`` or a
    ``set`` gets told so, because silently stringifying would change what later tasks compare.
    Keys that ``json.dumps`` would turn into strings (int, float, bool, None) are turned into
    strings here, so the value a later task of the same run sees equals the persisted one.
    """
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [strict_json(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if isinstance(k, str):
                key = k
            elif k is None or isinstance(k, bool | int | float):
                key = "null" if k is None else ("true" if k is True else "false" if k is False else str(k))
            else:
                raise ResultNotJsonError(f"{path} (a {type(k).__name__} key)", k)
            out[key] = strict_json(v, f"{path}[{key!r}]")
        return out
    raise ResultNotJsonError(path, value)
