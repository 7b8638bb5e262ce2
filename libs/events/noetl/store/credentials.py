"""The keychain store: named credentials in the NATS KV bucket ``noetl_credentials``.

Values are encrypted at rest with Fernet (AES-128-CBC + HMAC-SHA256), so the bucket, its
history and the JetStream files on disk hold no secret in clear. The key comes from the caller,
else ``NOETL_CREDENTIALS_KEY``, else the file named by ``NOETL_CREDENTIALS_KEY_FILE``; several
comma-separated keys are accepted for rotation (the first encrypts, any decrypts).

A store opened without a key can still say which entries exist and of what kind (that part of
an entry is stored in clear: the server checks a playbook's keychain before it starts without
ever holding a secret); reading or writing a value then fails with a message saying what to
set. Each encrypted value also carries its entry's name, so a ciphertext copied under another
name is refused.
"""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from noetl.dsl.errors import KeychainUnresolvedError
from noetl.events.port import Bus, KeyValue

BUCKET = "noetl_credentials"
KEY_ENV = "NOETL_CREDENTIALS_KEY"
KEY_FILE_ENV = "NOETL_CREDENTIALS_KEY_FILE"
_NAME = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_.=]*$")
_HOW = f"set {KEY_ENV} (or {KEY_FILE_ENV}) to the key the credentials were stored with"


def generate_key() -> str:
    """A new random key, in the form ``NOETL_CREDENTIALS_KEY`` takes (``Fernet.generate_key``'s
    own recipe, without importing cryptography for it)."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


def _key_text(key: bytes | str | None) -> str | None:
    if key:
        return key.decode("ascii") if isinstance(key, bytes) else key
    from noetl.events.settings import setting

    env_key = setting("credentials_key")
    if env_key is not None and env_key.get_secret_value():
        return str(env_key.get_secret_value())
    path = setting("credentials_key_file")
    if path:
        try:
            return Path(path).read_text().strip() or None
        except OSError as exc:
            raise KeychainUnresolvedError(f"{KEY_FILE_ENV}={path} cannot be read: {exc.strerror}") from None
    return None


def _keys(key: bytes | str | None) -> list[bytes] | None:
    """The keys, checked as ``Fernet`` checks them (32 url-safe base64-encoded bytes), so a bad
    one is refused at open; the cipher itself is made when first needed (``_Cipher``)."""
    text = _key_text(key)
    if text is None:
        return None
    try:
        keys = [k.strip().encode("ascii") for k in text.split(",") if k.strip()]
        if not keys or any(len(base64.urlsafe_b64decode(k)) != 32 for k in keys):
            raise ValueError("not a Fernet key")
        return keys
    except (ValueError, UnicodeEncodeError):
        raise KeychainUnresolvedError(
            f"the credentials key is not a valid Fernet key (32 url-safe base64-encoded bytes); "
            f"check {KEY_ENV} or {KEY_FILE_ENV}") from None


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"credential name {name!r} is invalid: use letters, digits, '_', '-', '.' and '='")
    return name


# Who may use a credential: catalog paths (exact, a prefix ending in "/", or "*" for any) and whether
# an inline playbook (text sent with the request, not registered) may. An inline playbook can be
# written by anyone who may send a request, so by default it may use no credential at all.
# A scope may also pin ``digests``: the SHA-256 of the playbook texts an admin has reviewed; then
# only those texts may use the credential, whoever writes the catalog.
# And it may constrain ``inputs``, the request's payload a run of such a playbook accepts: a
# reviewed playbook that sends its token to ``{{ workload.url }}`` is only as safe as the URLs its
# callers may pass, so the scope names each input a caller may give and what values it may take
# (``values``: one of these; ``pattern``: text matching this regular expression; ``{}``: any).
# An input it does not name is refused; ``"inputs": {}`` admits none (the playbook's own workload).
DEFAULT_SCOPE: dict[str, Any] = {"paths": ["*"], "inline": False}

_SCOPE_SHAPE = (
    'a credential scope is {"paths": ["finance/", "etl/daily", "*"], "inline": false, '
    '"digests": [...], "inputs": {"url": {"pattern": "https://api\\.example\\.com/.*"}, '
    '"region": {"values": ["eu", "us"]}, "day": {}}}: '
    "paths are catalog paths, prefixes ending in '/', or '*'; digests (optional) the SHA-256 hex "
    "digests of the only playbook texts that may use it; inputs (optional) the only payload keys a "
    "request may give, each with the values or the pattern (a Python regular expression, matched "
    "in full) it must have ({} for any value; \"inputs\": {} for no input at all)"
)


_RULE_KEYS = {"values", "pattern"}


def _check_inputs(inputs: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(inputs, dict):
        raise ValueError(_SCOPE_SHAPE)
    out: dict[str, dict[str, Any]] = {}
    for name, rule in inputs.items():
        if not (isinstance(name, str) and name and isinstance(rule, dict)) or set(rule) - _RULE_KEYS:
            raise ValueError(_SCOPE_SHAPE)
        checked: dict[str, Any] = {}
        if "values" in rule:
            if not isinstance(rule["values"], list):
                raise ValueError(f"scope input {name!r}: `values` is a list of the values it may take")
            checked["values"] = list(rule["values"])
        if "pattern" in rule:
            pattern = rule["pattern"]
            try:
                re.compile(pattern)
            except (re.error, TypeError) as e:
                raise ValueError(f"scope input {name!r}: `pattern` is no regular expression: {e}") from None
            checked["pattern"] = pattern
        out[name] = checked
    return out


def check_scope(scope: dict[str, Any] | None) -> dict[str, Any]:
    if scope is None:
        return dict(DEFAULT_SCOPE)
    paths, inline = scope.get("paths", ["*"]), scope.get("inline", False)
    digests = scope.get("digests")
    unknown = set(scope) - {"paths", "inline", "digests", "inputs"}
    if (
        unknown
        or not isinstance(paths, list)
        or not all(isinstance(p, str) and p for p in paths)
        or not isinstance(inline, bool)
        or (digests is not None and not (
            isinstance(digests, list)
            and all(isinstance(d, str) and re.fullmatch(r"[0-9a-f]{64}", d) for d in digests)
        ))
    ):
        raise ValueError(_SCOPE_SHAPE)
    out: dict[str, Any] = {"paths": list(paths), "inline": inline}
    if digests is not None:
        out["digests"] = list(digests)
    if scope.get("inputs") is not None:
        out["inputs"] = _check_inputs(scope["inputs"])
    return out


# a pattern is matched against at most this much text: an admin's regular expression must not let a
# caller's long input hold the request handler
MAX_PATTERN_INPUT = 8192


def _canonical(value: Any) -> str:
    """JSON text that compares as the value does, so ``true`` is not ``1`` and ``1.0`` is ``1``."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def scope_input_problems(scope: dict[str, Any], payload: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``[(input, why)]`` for each input of a request's ``payload`` the scope does not admit; empty
    when it admits them all (or constrains none). ``why`` describes the rule, never the value: the
    caller knows what it sent, and a log line should not carry it."""
    rules = scope.get("inputs")
    if rules is None:
        return []
    problems: list[tuple[str, str]] = []
    for name in sorted(payload or {}):
        value = (payload or {})[name]
        rule = rules.get(name)
        if rule is None:
            named = ", ".join(sorted(rules))
            problems.append((name, f"its scope admits only the inputs {named}" if rules else
                             "its scope admits no caller inputs (the playbook runs on its own workload)"))
            continue
        if "values" in rule and _canonical(value) not in {_canonical(v) for v in rule["values"]}:
            shown = ", ".join(_canonical(v) for v in rule["values"][:5])
            more = f" and {len(rule['values']) - 5} more" if len(rule["values"]) > 5 else ""
            problems.append((name, f"its scope admits only the values {shown}{more}"))
        fits = isinstance(value, str) and len(value) <= MAX_PATTERN_INPUT
        if "pattern" in rule and not (fits and re.fullmatch(rule["pattern"], value)):
            problems.append((name, f"its scope admits only text matching {rule['pattern']!r} "
                                   f"(at most {MAX_PATTERN_INPUT} characters)"))
    return problems


def scope_allows(scope: dict[str, Any], path: str | None, digest: str | None = None) -> bool:
    """Whether a playbook may use the credential: ``path`` is its catalog path, None when inline;
    ``digest`` its text's SHA-256, which must be one the scope pins when it pins any."""
    pinned = scope.get("digests")
    if pinned is not None and digest not in pinned:
        return False
    if path is None:
        return bool(scope.get("inline"))
    for allowed in scope.get("paths") or ():
        if allowed == "*" or allowed == path or (allowed.endswith("/") and path.startswith(allowed)):
            return True
    return False


class CredentialStore:
    """Put, get, delete and list keychain entries ``{kind, data}`` by name."""

    def __init__(self, kv: KeyValue, keys: list[bytes] | None) -> None:
        self.kv = kv
        self._keys = keys
        self._cipher: Any = None  # a MultiFernet over the keys, made on first use

    @classmethod
    async def open(cls, bus: Bus, key: bytes | str | None = None) -> CredentialStore:
        """Open the bucket, creating it when missing; the key as described in the module doc."""
        keys = _keys(key)
        return cls(await bus.kv(BUCKET, history=5), keys)

    @property
    def can_decrypt(self) -> bool:
        return self._keys is not None

    def _need_cipher(self, name: str, doing: str) -> Any:
        """The cipher, made on first use: importing cryptography cost every ``noetl run`` ~6 ms of
        its start-up, and most runs never store or read a credential."""
        if self._keys is None:
            raise KeychainUnresolvedError(f"cannot {doing} credential '{name}': no credentials key; {_HOW}",
                                          entry=name)
        if self._cipher is None:
            from cryptography.fernet import Fernet, MultiFernet

            self._cipher = MultiFernet([Fernet(k) for k in self._keys])
        return self._cipher

    async def put(
        self, name: str, kind: str, data: dict[str, Any], scope: dict[str, Any] | None = None
    ) -> None:
        cipher = self._need_cipher(check_name(name), "store")
        secret = json.dumps({"name": name, "data": data}, separators=(",", ":")).encode()
        record = {"kind": kind, "token": cipher.encrypt(secret).decode("ascii"), "scope": check_scope(scope)}
        await self.kv.put(name, json.dumps(record).encode())

    async def scope(self, name: str) -> dict[str, Any] | None:
        """The entry's scope (``DEFAULT_SCOPE`` for one stored without), None when it does not exist;
        needs no key: the scope is metadata, like the kind."""
        record = await self._record(name)
        if record is None:
            return None
        return record.get("scope") or dict(DEFAULT_SCOPE)

    async def kind(self, name: str) -> str | None:
        """The kind the entry is stored with, None when it does not exist; needs no key. The
        server compares it with the playbook's declaration before an execution starts."""
        record = await self._record(name)
        return None if record is None else record.get("kind")

    async def _record(self, name: str) -> dict[str, Any] | None:
        entry = await self.kv.get(check_name(name))
        if entry is None or not entry.value:
            return None
        record: dict[str, Any] = json.loads(entry.value)
        return record

    async def exists(self, name: str) -> bool:
        """Whether ``name`` is stored; needs no key."""
        return await self._record(name) is not None

    async def get(self, name: str) -> dict[str, Any] | None:
        """``{"kind", "data"}``, or None when there is no such entry."""
        record = await self._record(name)
        if record is None:
            return None
        cipher = self._need_cipher(name, "read")
        from cryptography.fernet import InvalidToken

        try:
            secret = json.loads(cipher.decrypt(record["token"].encode("ascii")))
        except (InvalidToken, KeyError, ValueError):
            raise KeychainUnresolvedError(
                f"credential '{name}' cannot be decrypted with this key: check {KEY_ENV} ({_HOW})",
                entry=name) from None
        if secret.get("name") != name:
            raise KeychainUnresolvedError(
                f"credential '{name}' holds a value stored under another name; store it again", entry=name)
        return {"kind": record.get("kind"), "data": secret.get("data")}

    async def resolve(self, names: Iterable[str]) -> dict[str, Any]:
        """``{name: data}`` for every name, or one error naming every entry that is missing."""
        out: dict[str, Any] = {}
        missing: list[str] = []
        for name in names:
            got = await self.get(name)
            if got is None:
                missing.append(name)
            else:
                out[name] = got["data"]
        if missing:
            raise KeychainUnresolvedError(
                f"keychain entr{'y' if len(missing) == 1 else 'ies'} not found in the credential store: "
                f"{', '.join(missing)}", entries=missing)
        return out

    async def delete(self, name: str) -> None:
        """Remove the entry with every stored revision (an old value must not linger in history)."""
        await self.kv.delete(check_name(name))

    async def list(self) -> list[dict[str, Any]]:
        """``[{name, kind}]`` sorted by name; never a value."""
        names = await self.kv.keys()
        out = []
        for name in sorted(set(names)):
            record = await self._record(name)
            if record is not None:
                out.append({"name": name, "kind": record.get("kind")})
        return out


def load_credentials_file(
    path: str | os.PathLike[str], declared: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Read ``name: {kind, data}`` YAML (the ``noetl run --credentials`` format).

    ``kind`` defaults to the kind the playbook declares for the entry (``declared``: name → kind),
    else ``secret``: an entry written without a kind is the one the playbook asks for, and the
    server refuses a declared kind that differs from the stored one (``keychain_kind_mismatch``).
    ``data`` must be a mapping. Errors name the file and the entry, never a value.
    """
    where = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise ValueError(f"{where}: cannot read credentials file: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"{where}:{line}: credentials file is not valid YAML") from None
    if doc is None:
        return {}
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: a credentials file is a mapping name: {{kind, data}}")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in doc.items():
        name = str(name)
        check_name(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("data", None), dict):
            raise ValueError(f"{where}: credential '{name}' needs `data`: a mapping of its fields")
        kind = entry.get("kind", (declared or {}).get(name, "secret"))
        if not isinstance(kind, str) or not kind:
            raise ValueError(f"{where}: credential '{name}': `kind` must be a string")
        unknown = set(entry) - {"kind", "data"}
        if unknown:
            raise ValueError(f"{where}: credential '{name}': unknown field(s) {sorted(unknown)}")
        out[name] = {"kind": kind, "data": entry["data"]}
    return out
