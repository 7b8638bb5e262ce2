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
from urllib.parse import quote, quote_plus, unquote, unquote_plus

MASK = "***"
MIN_LENGTH = 4
# what a secret should at least be: shorter ones, and words anyone would guess, are refused where
# credentials are stored (``weak_secret_problem``): masking them would rewrite data ("2026" in
# every date) and not masking them would print them
STRONG_LENGTH = 8
_COMMON = frozenset(
    [
        "password", "passw0rd", "postgres", "postgresql", "admin", "administrator", "root", "secret",
        "changeme", "letmein", "qwerty", "welcome", "default", "guest", "master", "oracle", "mysql",
        "sqlserver", "redis", "mongodb", "airflow", "superuser", "password1", "12345678", "123456789",
        "1234567890", "iloveyou", "sunshine", "football", "baseball", "monkey", "dragon", "trustno1",
        "abc12345", "qwertyuiop", "princess", "starwars",
    ]
)

# the engine's own words: error kinds, statuses, event names. A secret that happens to be part of
# one (a password "postgres" in "postgres_error") is never masked there: an arc on `postgres_error`
# must still fire, and the word tells nothing about the secret
_EVENT_NAMES = (
    "execution.cancel.requested", "execution.pause.requested", "execution.paused",
    "execution.resume.requested", "execution.resumed", "loop.done", "loop.iteration.done",
    "loop.iteration.failed", "loop.local.stopped", "loop.started", "playbook.execution.requested",
    "playbook.processed", "playbook.request.evaluated", "signal.received", "signal.taken", "step.cancelled",
    "step.done",
    "step.failed", "step.scheduled", "step.skipped", "step.waiting", "timer.fired", "workflow.finished",
    "workflow.started", "task.done", "task.started",
)
_STATUSES = ("in_progress", "success", "error", "skipped", "running", "failed", "cancelled", "ok")


def engine_vocabulary() -> frozenset[str]:
    """Every error kind, status and event name (see ``_EVENT_NAMES``)."""
    from noetl.dsl.errors import all_error_kinds

    return frozenset((*all_error_kinds(), *_EVENT_NAMES, *_STATUSES))


def weak_secret_problem(secret: str) -> str | None:
    """Why ``secret`` is too weak to be a credential's secret (never quoting it), or None."""
    if len(secret) < STRONG_LENGTH:
        return f"a secret of {len(secret)} characters (at least {STRONG_LENGTH})"
    if secret.lower() in _COMMON or secret.lower() in engine_vocabulary():
        return "a secret that is a common word or password"
    return None


def weak_secrets(data: Any, kind: str | None = None) -> list[str]:
    """The problems of an entry's weak secrets (``weak_secret_problem``), no value in them. The
    fields judged are those whose name says secret (whatever the kind: a ``user`` beside a
    ``password`` in a ``secret`` entry is no password), or every string of a non-mapping."""
    return sorted({p for s in secret_strings(data, None) if (p := weak_secret_problem(s))})


def weak_refusal(name: str, data: Any, kind: str | None, way_out: str = "") -> str | None:
    """Why the credential ``name`` may not be stored as it is (its weak secrets, never their
    values), or None; ``way_out`` names the caller's own override, where it has one."""
    if not (weak := weak_secrets(data, kind)):
        return None
    return f"credential {name!r} holds {'; '.join(weak)}: use a stronger secret{way_out}"


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
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
# libpq key=value: ``password=secret`` or ``password='it''s a \'quoted\' one'``
_KV_PASSWORD = re.compile(
    r"(?:^|[\s;?&])(?:password|pwd|passwd)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|([^'\s;&#]+))", re.IGNORECASE
)
# no scheme: ``user:password@host[:port][/db]`` (what a driver's error message may echo)
_BARE_DSN = re.compile(r"^([^\s:/@]+):(.+)@([^\s@/:]+)(?::\d+)?(?:/\S*)?$")
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
    """The password inside a DSN, found as asyncpg and libpq find it: a URL's user info ends at
    its *last* ``@`` (``postgresql://u:p@ss@db`` has the password ``p@ss``), a query may carry
    ``?password=``, a key=value DSN may quote a password with spaces, and a DSN may have no
    scheme at all (``u:pw@db:5432/x``, which driver errors echo)."""
    found: list[str] = []
    if _SCHEME.match(text):
        rest = text[_SCHEME.match(text).end():]  # type: ignore[union-attr]
        cut = len(rest)
        at = rest.rfind("@")
        for sep in "/?#":  # the host part ends at the first of these after the last '@'
            i = rest.find(sep, at + 1 if at >= 0 else 0)
            if i >= 0:
                cut = min(cut, i)
        netloc = rest[:cut]
        userinfo, sep_at, _ = netloc.rpartition("@")
        if sep_at and ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    else:
        m = _BARE_DSN.match(text.strip())
        if m:
            found.append(m.group(2))
    for m in _KV_PASSWORD.finditer(text):
        quoted, plain = m.group(1), m.group(2)
        if quoted is not None:
            found.append(quoted)
            found.append(re.sub(r"\\(.)", r"\1", quoted))
        elif plain:
            found.append(plain)
    for secret in found:
        if secret:
            yield secret
            with contextlib.suppress(ValueError):
                yield unquote(secret)
                yield unquote_plus(secret)


def _b64_inner(raw: bytes, encode: Any) -> Iterable[str]:
    """The base64 of ``raw`` as it appears inside the base64 of a longer text, at each of the
    three byte alignments: only the characters that depend on ``raw`` alone."""
    for shift in range(3):
        enc = encode(b"\0" * shift + raw).decode("ascii").rstrip("=")
        head = (shift * 4 + 2) // 3  # characters touched by the padding before
        tail = (len(raw) + shift) % 3  # the last group also holds what follows
        body = enc[head: len(enc) - (1 if tail else 0)]
        if len(body) >= MIN_LENGTH:
            yield body


def _variants(secret: str) -> Iterable[str]:
    yield secret
    yield quote(secret, safe="")
    yield quote_plus(secret, safe="")  # form encoding: a space is '+'
    yield quote(secret, safe="!$&'()*+,;=:@/?~")  # httpx keeps these in a URL's path and query
    yield quote_plus(secret, safe="!$'()*,;:@/?~")  # and in a query, with '+' for a space
    yield json.dumps(secret)[1:-1]
    yield repr(secret)[1:-1]  # both quotes: repr escapes the one it wraps the text in
    yield repr(secret.encode())[2:-1]
    raw = secret.encode()
    yield base64.b64encode(raw).decode("ascii").rstrip("=")
    yield base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    yield from _b64_inner(raw, base64.b64encode)
    yield from _b64_inner(raw, base64.urlsafe_b64encode)
    yield raw.hex()
    yield raw.hex().upper()


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
        words = sorted(
            (w for w in engine_vocabulary() if any(s in w for s in self._secrets)), key=len, reverse=True
        ) if self._secrets else []
        self._vocab = re.compile("|".join(re.escape(w) for w in words)) if words else None

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
        if self._vocab is not None:  # an engine word is never a secret's disguise: leave it whole
            kept = [(m.start(), m.end()) for m in self._vocab.finditer(text)]
            spans = [(a, b) for a, b in spans if not any(ka <= a and b <= kb for ka, kb in kept)]
            if not spans:
                return text
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
