"""Masking keychain values in whatever the worker persists or prints (SEMANTICS §12).

Like CI systems do with secrets in logs: every string found in a resolved keychain entry is
replaced by ``***`` wherever it appears — in values, in mapping keys, inside longer strings
(an API that echoes ``Bearer <token>`` back). Besides the raw strings the masker also hides the
forms a secret commonly takes on the way out: URL-encoded (a token in a query string), JSON-
escaped (a secret with quotes, inside serialized text) and the base64 ``user:password`` of an
HTTP basic ``Authorization`` header.

Strings shorter than 4 characters are not masked: they would turn every ``5432`` or ``true``
into ``***`` and make output unreadable without protecting anything.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote

MASK = "***"
MIN_LENGTH = 4


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list | tuple | set | frozenset):
        for v in value:
            yield from _strings(v)


def _variants(secret: str) -> Iterable[str]:
    yield secret
    yield quote(secret, safe="")
    yield json.dumps(secret)[1:-1]


def _basic_auth(data: Any) -> Iterable[str]:
    if isinstance(data, Mapping):
        user = data.get("username", data.get("user"))
        password = data.get("password")
        if isinstance(user, str) and isinstance(password, str):
            yield base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class Masker:
    """Built once per command from its resolved keychain ``{name: data}``."""

    def __init__(self, keychain: Mapping[str, Any] | None = None, extra: Iterable[str] = ()) -> None:
        found: set[str] = set()
        for data in (keychain or {}).values():
            for s in _strings(data):
                found.update(_variants(s))
            found.update(_basic_auth(data))
        for s in extra:
            found.update(_variants(s))
        self._secrets = sorted((s for s in found if len(s) >= MIN_LENGTH), key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(s) for s in self._secrets)) if self._secrets else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def mask_text(self, text: str) -> str:
        """``text`` with every secret occurrence replaced; overlapping secrets merge into one mask."""
        if self._pattern is None or not self._pattern.search(text):
            return text
        spans: list[tuple[int, int]] = []
        for secret in self._secrets:  # every occurrence of every secret, overlaps included
            start = text.find(secret)
            while start >= 0:
                spans.append((start, start + len(secret)))
                start = text.find(secret, start + 1)
        spans.sort()
        out: list[str] = []
        pos = 0
        end = -1
        for a, b in spans:
            if a > end:
                if end >= 0:
                    out.append(MASK)
                out.append(text[pos:a])
                end = b
            else:
                end = max(end, b)
            pos = end
        out.append(MASK)
        out.append(text[pos:])
        return "".join(out)

    def mask(self, obj: Any) -> Any:
        """A masked copy of a JSON-like value (mappings, lists, tuples, strings, scalars).

        Without secrets the value itself is returned: callers treat it as read-only.
        """
        if self._pattern is None:
            return obj
        return self._mask(obj)

    def _mask(self, obj: Any) -> Any:
        if isinstance(obj, str):
            return self.mask_text(obj)
        if isinstance(obj, Mapping):
            return {(self.mask_text(k) if isinstance(k, str) else k): self._mask(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self._mask(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self._mask(v) for v in obj)
        return obj
