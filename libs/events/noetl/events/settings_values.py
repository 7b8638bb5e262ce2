"""How a setting's text becomes its value (``noetl.events.settings``): durations (``500ms``,
``30``, ``30s``, ``5m``, ``12h``, ``30d``), sizes (``64KB``, ``1MiB``-free decimal units), empty
as unset, log levels and formats; and ``SettingsError``, the one-line refusal naming the variable.
"""

from __future__ import annotations

import re
from typing import Any

from noetl.dsl.errors import DeploymentError

PREFIX = "NOETL_"
CONFIG_ENV = "NOETL_CONFIG"


_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$", re.IGNORECASE)


_SIZES = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "t": 10**12, "tb": 10**12, "ki": 2**10, "kib": 2**10, "mi": 2**20, "mib": 2**20,
          "gi": 2**30, "gib": 2**30, "ti": 2**40, "tib": 2**40}  # fmt: skip


_SIZE = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$", re.IGNORECASE)


class SettingsError(DeploymentError):
    """A setting with a value it cannot take; the message is one line naming the variable."""

    kind = "settings_invalid"


def parse_duration(value: Any) -> float:
    """Seconds from ``500ms``, ``30`` (seconds), ``30s``, ``5m``, ``12h``, ``30d``, ``1w``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    else:
        m = _DURATION.match(str(value))
        if m is None:
            raise ValueError("use a duration such as 500ms, 30s, 5m, 12h, 30d (a bare number is seconds)")
        seconds = float(m.group(1)) * _UNITS[(m.group(2) or "s").lower()]
    if seconds < 0:
        raise ValueError("a duration cannot be negative")
    return seconds


def parse_size(value: Any) -> int:
    """Bytes from ``1048576``, ``10GB``, ``512MiB``; ``-1``, ``0`` or empty: unlimited (-1)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return -1
    if isinstance(value, int) and not isinstance(value, bool):
        return value if value > 0 else -1
    text = str(value).strip()
    if text == "-1":
        return -1
    m = _SIZE.match(text)
    if m is None or m.group(2).lower() not in _SIZES:
        raise ValueError("give a number of bytes, such as 1073741824, 10GB or 512MiB (-1: unlimited)")
    n = int(m.group(1)) * _SIZES[m.group(2).lower()]
    return n if n > 0 else -1


def _empty_is_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


def _level(value: Any) -> Any:
    return value.strip().upper() or None if isinstance(value, str) else value


def _format(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    value = value.strip().lower()
    return "console" if value in ("text", "plain") else value or None
