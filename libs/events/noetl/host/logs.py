"""Structured logs for every NoETL process.

structlog renders both our own log calls and the standard library's (nats-py, uvicorn), so one
process writes one format: JSON lines in production (``NOETL_LOG_FORMAT=json``, the default when
stderr is not a terminal, which is what Kubernetes log collectors read) and aligned, readable
lines on a terminal. ``execution_id``, ``step`` and ``task`` are bound as context variables where
work happens, so every line written while a command runs carries them. Every keychain value a
worker resolves is registered here and replaced by ``***`` in every rendered line, whoever wrote it.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

import structlog

from noetl.events.masking import Masker

_keychain: dict[str, Any] = {}
_kinds: dict[str, str | None] = {}
_extra: set[str] = set()
_masker = Masker()


def register_keychain(keychain: Mapping[str, Any], kinds: Mapping[str, str | None] | None = None) -> None:
    """Resolved keychain entries whose secrets (and their encoded forms) never appear in a log line.

    The same :class:`Masker` masks events, so logs and events hide exactly the same strings."""
    global _masker
    kinds = kinds or {}
    if any(_keychain.get(k) != v or _kinds.get(k) != kinds.get(k) for k, v in keychain.items()):
        _keychain.update(keychain)
        _kinds.update({k: kinds.get(k) for k in keychain})
        _masker = Masker(_keychain, _extra, _kinds)


def register_secrets(values: Iterable[str]) -> None:
    """Plain strings to mask as well (the masker ignores ones too short to mask safely)."""
    global _masker
    new = {v for v in values if isinstance(v, str)} - _extra
    if new:
        _extra.update(new)
        _masker = Masker(_keychain, _extra, _kinds)


def mask(text: str) -> str:
    return _masker.mask_text(text)


def _mask_processor(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    if not _masker:
        return event_dict
    return {k: mask(v) if isinstance(v, str) else v for k, v in event_dict.items()}


class _MaskingRenderer:
    """Masks the rendered line too: a secret inside a nested value or a traceback is still caught."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __call__(self, logger: Any, name: str, event_dict: MutableMapping[str, Any]) -> str:
        line = self.inner(logger, name, event_dict)
        return mask(line) if _masker else line


def log_format() -> str:
    """``json`` or ``console``: ``NOETL_LOG_FORMAT``, else JSON unless stderr is a terminal."""
    from noetl.events.settings import SettingsError, setting

    try:
        fmt: str | None = setting("log_format")
    except SettingsError:
        fmt = None
    return fmt or ("console" if sys.stderr.isatty() else "json")


def configure(level: str | None = None, fmt: str | None = None) -> None:
    from noetl.events.settings import setting

    level = (level or setting("log_level") or "INFO").upper()
    fmt = fmt or setting("log_format") or log_format()
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.stdlib.ExtraAdder(),
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _mask_processor,
    ]
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=shared,
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _MaskingRenderer(renderer),
        ],
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # Python's warnings as log records too: with JSON logs nothing plain is mixed into stderr
    logging.captureWarnings(True)


bind = structlog.contextvars.bind_contextvars
unbind = structlog.contextvars.unbind_contextvars
bound = structlog.contextvars.bound_contextvars
