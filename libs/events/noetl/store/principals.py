"""Principals, roles and namespaces: who may do what (docs/security.md#principals).

A principal is a name, a role and the namespaces it acts in. A namespace is the first segment of
a catalog path (``team_a`` covers ``team_a/job`` and ``team_a/etl/daily``); a path without a
``/`` is in the namespace ``""``, which only a principal of every namespace reaches. Every
target of an action (a playbook, an execution, a schedule) has the namespace of its catalog path,
so a credential scoped to ``team_a/`` can only be used by playbooks that principals of ``team_a``
(or admins) wrote.

Roles, strongest first:

- ``admin``: everything, in every namespace; the only role that manages credentials.
- ``operator``: in its namespaces, reads and writes: register playbooks, start, signal, pause,
  resume and cancel executions, manage schedules.
- ``viewer``: in its namespaces, reads only.

Principals come from an auth file (``--auth-file`` / ``NOETL_AUTH_FILE``)::

    principals:
      - {name: root, token: "...", role: admin}
      - {name: alice, token_sha256: "<hex>", role: operator, namespaces: [team_a]}

and the two older tokens stay as shortcuts: ``NOETL_API_ADMIN_TOKEN`` is the principal ``admin``
(role admin) and ``NOETL_API_TOKEN`` the principal ``user`` (an operator of every namespace).
With no principal at all the API is loopback-only and its caller is an admin (``anonymous``).

Tokens are compared in constant time against their SHA-256, never logged, and refused when
shorter than ``MIN_TOKEN_LENGTH``: a one-character token is no secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from noetl.dsl.errors import DeploymentError
from noetl.events.settings import setting

AUTH_FILE_ENV = "NOETL_AUTH_FILE"
ROLES = ("admin", "operator", "viewer")
ACTIONS = ("read", "write", "admin")
MIN_TOKEN_LENGTH = 16
_NAME = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_.@]*$")
_NAMESPACE = re.compile(r"^[A-Za-z0-9_][-A-Za-z0-9_]*$")


def namespace_of(path: str | None) -> str:
    """The namespace of a catalog path: its first segment (``team_a/job`` -> ``team_a``), else ``""``."""
    if not path or "/" not in path:
        return ""
    return path.split("/", 1)[0]


@dataclass(frozen=True)
class Principal:
    """Who is calling; ``namespaces`` None means every namespace."""

    name: str
    role: str
    namespaces: frozenset[str] | None = None

    def covers(self, namespace: str | None) -> bool:
        """Whether ``namespace`` is one this principal acts in."""
        return self.role == "admin" or self.namespaces is None or (namespace or "") in self.namespaces

    def may(self, action: str, namespace: str | None = None) -> bool:
        """``action``: ``read`` (see), ``write`` (change or run) or ``admin`` (credentials, values)."""
        if self.role == "admin":
            return True
        if action == "admin":
            return False
        if action == "write" and self.role != "operator":
            return False
        return self.covers(namespace)

    def record(self) -> dict[str, Any]:
        """How events and audit records name the caller (never a token)."""
        return {"name": self.name, "role": self.role}


    def grant(self) -> dict[str, Any]:
        """``record`` with the namespaces: what an execution's request keeps, so the requests its
        ``playbook`` tasks make are checked as its caller's (``from_grant``)."""
        spaces = None if self.namespaces is None else sorted(self.namespaces)
        return {**self.record(), "namespaces": spaces}

    @classmethod
    def from_grant(cls, grant: Any) -> Principal | None:
        """The principal a request recorded (``grant``), or None for one recorded without."""
        if not isinstance(grant, dict) or grant.get("role") not in ROLES:
            return None
        if not isinstance(grant.get("name"), str):
            return None
        spaces = grant.get("namespaces")
        return cls(grant["name"], grant["role"], None if spaces is None else frozenset(map(str, spaces)))


ANONYMOUS = Principal("anonymous", "admin", None)


def _sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def check_token(token: str, where: str) -> str:
    """A token long enough to be a secret, or ``DeploymentError`` naming ``where``."""
    if not isinstance(token, str) or len(token.strip()) < MIN_TOKEN_LENGTH:
        raise DeploymentError(
            f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters (generate one with "
            "`openssl rand -hex 32`)"
        )
    return token.strip()


class Principals:
    """The principals of one deployment, found by the token a caller presents."""

    def __init__(self, entries: list[tuple[str, Principal]] | None = None) -> None:
        self._by_sha: list[tuple[str, Principal]] = list(entries or [])

    @property
    def required(self) -> bool:
        """Whether a caller must present a token (any principal configured)."""
        return bool(self._by_sha)

    def __iter__(self) -> Any:
        return iter(p for _, p in self._by_sha)

    def identify(self, token: str | None) -> Principal | None:
        """The principal whose token this is; ``ANONYMOUS`` when none is configured; else None."""
        if not self._by_sha:
            return ANONYMOUS
        if not token:
            return None
        digest = _sha(token)
        found = None
        for sha, principal in self._by_sha:
            if hmac.compare_digest(sha, digest):  # every entry compared: no timing by position
                found = found or principal
        return found

    async def identify_session(
        self, cookie: str, generation: Callable[[str], Awaitable[int]]
    ) -> Principal | None:
        """The principal whose console session cookie this is (``noetl.server.api.auth``), at the
        principal's current session ``generation`` (raised by signing out)."""
        found = None
        for sha, principal in self._by_sha:
            gen = await generation(principal.name)
            salt = b"noetl-console-session-v1" + (f":{gen}".encode() if gen else b"")
            value = hmac.new(sha.encode(), salt, hashlib.sha256).hexdigest()
            if hmac.compare_digest(value.encode(), cookie.encode()):
                found = found or principal
        return found

    @classmethod
    def load(
        cls,
        token: str | None = None,
        admin_token: str | None = None,
        auth_file: str | os.PathLike[str] | None = None,
    ) -> Principals:
        """The two shortcut tokens and the auth file's principals (``NOETL_AUTH_FILE`` when
        ``auth_file`` is None). Raises ``DeploymentError`` for a bad file or short token."""
        entries: list[tuple[str, Principal]] = []
        if admin_token:
            sha = _sha(check_token(admin_token, "NOETL_API_ADMIN_TOKEN"))
            entries.append((sha, Principal("admin", "admin")))
        if token:
            entries.append((_sha(check_token(token, "NOETL_API_TOKEN")), Principal("user", "operator")))
        path = auth_file if auth_file is not None else setting("auth_file")
        if path:
            entries.extend(load_auth_file(path))
        shas = [sha for sha, _ in entries]
        if len(set(shas)) != len(shas):
            raise DeploymentError("two principals share one token: each needs its own")
        return cls(entries)


def load_auth_file(path: str | os.PathLike[str]) -> list[tuple[str, Principal]]:
    """``[(token_sha256, principal)]`` from an auth file; errors name the entry, never a token."""
    where = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise DeploymentError(f"{where}: cannot read the auth file: {e.strerror}") from None
    except yaml.YAMLError:
        raise DeploymentError(f"{where}: the auth file is not valid YAML") from None
    items = doc.get("principals") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not items:
        raise DeploymentError(f"{where}: an auth file is `principals: [{{name, token, role, namespaces}}]`")
    out: list[tuple[str, Principal]] = []
    names: set[str] = set()
    for i, item in enumerate(items):
        at = f"{where}: principals[{i}]"
        if not isinstance(item, dict):
            raise DeploymentError(f"{at}: a principal is a mapping")
        unknown = set(item) - {"name", "token", "token_sha256", "role", "namespaces"}
        if unknown:
            raise DeploymentError(f"{at}: unknown field(s) {sorted(unknown)}")
        name, role = item.get("name"), item.get("role")
        if not isinstance(name, str) or not _NAME.match(name) or name in names:
            raise DeploymentError(f"{at}: `name` must be a unique name of letters, digits, '_', '-', '.'")
        names.add(name)
        if role not in ROLES:
            raise DeploymentError(f"{at} ({name}): `role` is one of {', '.join(ROLES)}")
        if ("token" in item) == ("token_sha256" in item):
            raise DeploymentError(f"{at} ({name}): give exactly one of `token` and `token_sha256`")
        if "token" in item:
            sha = _sha(check_token(item["token"], f"{at} ({name})"))
        else:
            sha = str(item["token_sha256"]).lower()
            if not re.fullmatch(r"[0-9a-f]{64}", sha):
                raise DeploymentError(f"{at} ({name}): `token_sha256` is 64 hex digits")
        spaces = item.get("namespaces")
        if spaces is None:
            namespaces = None
        elif isinstance(spaces, list) and all(
            isinstance(n, str) and (n == "*" or _NAMESPACE.match(n)) for n in spaces
        ):
            namespaces = None if "*" in spaces else frozenset(spaces)
        else:
            raise DeploymentError(
                f"{at} ({name}): `namespaces` is a list of names (letters, digits, '_', '-') or ['*']"
            )
        if role != "admin" and namespaces is None and spaces is None:
            raise DeploymentError(
                f"{at} ({name}): a {role} names its `namespaces` (['*'] for every namespace)"
            )
        out.append((sha, Principal(name, role, namespaces)))
    return out
