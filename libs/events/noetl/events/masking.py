"""Masking keychain secrets in whatever the worker persists or prints (SEMANTICS §12).

Like CI systems do with secrets in logs, the secret material of every resolved keychain entry is
replaced by ``***`` wherever it appears: in values, in mapping keys, inside longer strings (an API
that echoes ``Bearer <token>`` back). Only the secret material, never the rest of the entry: a
user name, a host, a port or a database name is data the playbook routes and computes on
(``postgres_error`` must stay ``postgres_error`` when the database is called ``postgres``).
What is secret (docs/dsl.md#keychain):

- an entry of kind ``secret``: every string in it;
- any other kind: the fields whose name says so (password, passwd, pwd, secret, token, api key,
  private/access/secret key, client secret, credential(s), auth, authorization, bearer, cookie,
  session, signature, key, value), everything below such a field, the password inside a URL or
  DSN (``scheme://user:PASSWORD@host``, ``password=...``), and the fields an entry names itself
  in ``secret_fields: [name, ...]``.

Besides the raw strings the masker also hides the forms a secret commonly takes on the way out:
URL-encoded (a token in a query string), JSON-escaped (inside serialized text), base64 and hex,
and the base64 ``user:password`` of an HTTP basic ``Authorization`` header.

Strings shorter than 4 characters are not masked: they would turn every ``5432`` or ``true``
into ``***`` and make output unreadable without protecting anything.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, unquote

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


_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?|pwd|secret|token|api[_-]?key|apikey|private[_-]?key|access[_-]?key"
    r"|client[_-]?secret|credentials?|auth|bearer|cookie|session|signature|^key$|^value$",
    re.IGNORECASE,
)
_URL_PASSWORD = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://[^/:@\s]*:([^@\s]+)@")
_KV_PASSWORD = re.compile(r"(?:^|[\s;])(?:password|pwd)\s*=\s*'?([^'\s;]+)", re.IGNORECASE)


def secret_strings(data: Any, kind: str | None = None) -> Iterable[str]:
    """The secret material of one keychain entry (see the module doc), raw."""
    if kind == "secret" or not isinstance(data, Mapping):
        yield from _strings(data)
        return
    named = data.get("secret_fields")
    marked = {n for n in named if isinstance(n, str)} if isinstance(named, list) else set()
    yield from _secret_fields(data, marked)


def _secret_fields(data: Mapping[str, Any], marked: set[str]) -> Iterable[str]:
    for name, value in data.items():
        if name == "secret_fields":
            continue
        if (isinstance(name, str) and _SECRET_NAME.search(name)) or name in marked:
            yield from _strings(value)
        elif isinstance(value, Mapping):
            yield from _secret_fields(value, marked)
        elif isinstance(value, list | tuple):
            for item in value:
                if isinstance(item, Mapping):
                    yield from _secret_fields(item, marked)
                elif isinstance(item, str):
                    yield from _embedded(item)
        elif isinstance(value, str):
            yield from _embedded(value)


def _embedded(text: str) -> Iterable[str]:
    """The password inside a URL or a key=value DSN."""
    m = _URL_PASSWORD.match(text)
    if m:
        yield m.group(1)
        with contextlib.suppress(ValueError):
            yield unquote(m.group(1))
    for m in _KV_PASSWORD.finditer(text):
        yield m.group(1)


def _variants(secret: str) -> Iterable[str]:
    yield secret
    yield quote(secret, safe="")
    yield json.dumps(secret)[1:-1]
    raw = secret.encode()
    yield base64.b64encode(raw).decode("ascii").rstrip("=")
    yield base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    yield raw.hex()


def _basic_auth(data: Any) -> Iterable[str]:
    if isinstance(data, Mapping):
        user = data.get("username", data.get("user"))
        password = data.get("password")
        if isinstance(user, str) and isinstance(password, str):
            yield base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


class Masker:
    """Built once per command from its resolved keychain ``{name: data}`` and their ``kinds``
    (``{name: kind}``; an entry without a kind is judged by its field names)."""

    def __init__(
        self,
        keychain: Mapping[str, Any] | None = None,
        extra: Iterable[str] = (),
        kinds: Mapping[str, str | None] | None = None,
    ) -> None:
        found: set[str] = set()
        for name, data in (keychain or {}).items():
            for s in secret_strings(data, (kinds or {}).get(name)):
                if len(s) >= MIN_LENGTH:
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
