"""Saying what the NATS connection does: every failure logged at once, then at a back-off, with
the URL (credentials stripped) and the cause; and what the nats-server offers, checked at start.

nats-py retries inside ``connect`` and reports each failure to an error callback, so a wrong URL
or token used to give no log line at all, forever, with five attempts a second. Here the first
failure of a streak is a WARNING naming the server and the cause, repeats are logged at doubling
intervals, a different cause is logged at once, and attempts themselves back off. The same state
feeds the server's ``/health``. No log line and no health answer ever holds a password, token,
nkey seed or the user part of a URL: every text goes through ``scrub`` first.

``check_server`` refuses, with one line, a nats-server without JetStream or older than message
scheduling: such a server accepts a stream created with ``allow_msg_schedules`` and then never
fires a schedule, so every timer and cron schedule would silently do nothing.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from noetl.dsl.errors import DeploymentError

log = logging.getLogger("noetl.nats")

# message scheduling came with 2.12 (@at, the timers); cron, @every and time zones with 2.14
MIN_SERVER_VERSION = (2, 14, 0)
WHY_VERSION = (
    "JetStream message scheduling with cron and time zones (timers and `noetl schedule`: "
    "nats-server 2.12 has @at only, 2.14 adds cron)"
)

FIRST_RETRY = 1.0  # seconds between connect rounds: 1, 2, 4 ... capped
MAX_RETRY = 30.0
LOG_EVERY_MAX = 60.0  # a streak of the same failure is logged at most this far apart
RECONNECT_MAX_DELAY = 5.0  # after a connection was up: first retry at once, then back off to this


def redact_url(url: str) -> str:
    """``nats://user:secret@host:4222`` -> ``nats://***@host:4222``: where it points, not who
    connects (a URL may carry a token or a password)."""
    text = url.strip()
    try:
        parts = urlsplit(text if "://" in text else f"nats://{text}")
    except ValueError:
        return "<unparseable NATS URL>"
    if "@" not in parts.netloc:
        return text
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, parts.fragment))


def redact_urls(url: str | Iterable[str]) -> str:
    """A comma-separated list (or a list) of URLs, each redacted, as one comma-separated string."""
    parts = url.split(",") if isinstance(url, str) else list(url)
    return ",".join(redact_url(u) for u in parts if u and u.strip())


def secrets_of(urls: Iterable[str], opts: dict[str, Any]) -> list[str]:
    """The texts that must never reach a log line: the user parts of the URLs and the credential
    options (user, password, token, nkey seed)."""
    found: list[str] = []
    for u in urls:
        try:
            parts = urlsplit(u if "://" in u else f"nats://{u}")
        except ValueError:
            continue
        for part in (parts.username, parts.password):
            if part:
                found.append(part)
    for key in ("password", "token", "nkeys_seed", "nkeys_seed_str", "user"):
        value = opts.get(key)
        if isinstance(value, str) and value:
            found.append(value)
    # longest first, so that a secret that contains another is replaced whole
    return sorted({s for s in found if len(s) >= 3}, key=len, reverse=True)


def describe(e: BaseException) -> str:
    """An exception as one short line: its type and message, without nats-py's 'nats: ' prefix."""
    text = str(e).strip()
    text = re.sub(r"^nats: ", "", text).strip("'\"")
    name = type(e).__name__
    if name in ("Error", "_Reported") and text:  # nats-py's generic error: its text says it all
        return text
    return f"{name}: {text}" if text else name


@dataclass
class ConnectionState:
    """What the NATS connection is doing, for log lines and ``/health``; never holds a secret."""

    url: str  # redacted
    connected: bool = False
    last_error: str | None = None
    last_error_at: float | None = None  # unix time
    failures: int = 0  # failed attempts in the current streak
    down_since: float | None = None  # unix time the current streak began
    server_version: str | None = None
    secrets: list[str] = field(default_factory=list, repr=False)

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, "***")
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "connected": self.connected,
            "last_error": self.last_error,
            "last_error_at": self.last_error_at,
            "failed_attempts": self.failures,
            "down_since": self.down_since,
            "server_version": self.server_version,
        }


class ConnectionLog:
    """The nats-py callbacks of one connection: logs failures with back-off, tracks the state,
    and paces reconnects (``reconnect_to_server_handler``) instead of nats-py's fixed 0.2 s."""

    def __init__(self, state: ConnectionState, name: str, *, level: int = logging.WARNING) -> None:
        self.state = state
        self.name = name
        self.level = level
        self.nc: Any = None  # the client these callbacks belong to (set before it connects)
        self._next_log_at = 0.0
        self._log_every = 1.0
        self._logged_cause: str | None = None
        self._was_connected = False
        self._other_errors: dict[str, float] = {}

    # -- failures ------------------------------------------------------------------------------
    def failed(self, e: BaseException) -> None:
        """One failed attempt: logged at once when a streak begins or its cause changes, else
        at doubling intervals; the state keeps the last cause for ``/health``."""
        now = time.time()
        st = self.state
        cause = st.scrub(describe(e))
        if (
            isinstance(e, ConnectionResetError | EOFError)
            and st.last_error
            and st.last_error_at is not None
            and now - st.last_error_at < 2.0
        ):
            cause = st.last_error  # the server hanging up after saying why: keep the why
        if st.failures == 0:
            st.down_since = now
        st.failures += 1
        st.connected = False
        st.last_error, st.last_error_at = cause, now
        mono = time.monotonic()
        if cause != self._logged_cause or mono >= self._next_log_at:
            if cause != self._logged_cause:
                self._log_every = 1.0
            else:
                self._log_every = min(self._log_every * 2, LOG_EVERY_MAX)
            self._next_log_at = mono + self._log_every
            self._logged_cause = cause
            what = "lost NATS" if self._was_connected else "cannot connect to NATS"
            log.log(
                self.level,
                "%s: %s at %s: %s (%d failed attempt%s since %s); retrying with back-off",
                self.name,
                what,
                st.url,
                cause,
                st.failures,
                "" if st.failures == 1 else "s",
                time.strftime("%H:%M:%S", time.localtime(st.down_since or now)),
            )

    def up(self, nc: Any) -> None:
        st = self.state
        version = (getattr(nc, "_server_info", None) or {}).get("version")
        where = nc.connected_url.netloc.rsplit("@", 1)[-1] if getattr(nc, "connected_url", None) else st.url
        if st.failures:
            log.warning(
                "%s: %s NATS at %s (nats-server %s) after %d failed attempt%s over %.1f s",
                self.name,
                "reconnected to" if self._was_connected else "connected to",
                where,
                version or "?",
                st.failures,
                "" if st.failures == 1 else "s",
                time.time() - (st.down_since or time.time()),
            )
        else:
            log.info("%s: connected to NATS at %s (nats-server %s)", self.name, where, version or "?")
        parsed = parse_version(version)
        if self._was_connected and parsed is not None and parsed < MIN_SERVER_VERSION:
            # checked at start; a reconnect may land on another node of a mixed cluster
            log.error(
                "%s: reconnected to nats-server %s at %s, older than %s: timers and schedules "
                "stored on it will not fire (%s); upgrade that node",
                self.name,
                version,
                where,
                _dotted(MIN_SERVER_VERSION),
                WHY_VERSION,
            )
        st.connected, st.failures, st.down_since, st.server_version = True, 0, None, version
        self._logged_cause, self._log_every, self._next_log_at = None, 1.0, 0.0
        self._was_connected = True

    # -- nats-py callbacks ---------------------------------------------------------------------
    async def error_cb(self, e: Exception) -> None:
        """nats-py's error callback. Failures to reach or be admitted by a server count toward
        the streak; other asynchronous errors (a slow consumer, a permission error) are logged."""
        if isinstance(e, OSError | TimeoutError) or _is_connect_error(e):
            self.failed(e)
            return
        kind, now = type(e).__name__, time.monotonic()
        if now >= self._other_errors.get(kind, 0.0):  # each kind at most once a minute
            self._other_errors[kind] = now + LOG_EVERY_MAX
            log.log(self.level, "%s: NATS error: %s", self.name, self.state.scrub(describe(e)))

    async def disconnected_cb(self) -> None:
        if self.nc is not None and self.nc.is_closed:  # closed on purpose (drain, close, stop)
            self.state.connected = False
            return
        if self.state.connected:
            self.state.connected = False
            self.state.down_since = time.time()
            log.warning("%s: disconnected from NATS at %s; reconnecting", self.name, self.state.url)

    async def reconnected_cb(self) -> None:
        if self.nc is not None:
            self.up(self.nc)

    def next_server(self, servers: list[Any], _info: dict[str, Any]) -> tuple[Any, float]:
        """nats-py's ``reconnect_to_server_handler``: the server tried least (round robin over a
        cluster's nodes), after a delay that grows with the streak: the first attempt at once (a
        restarted node is back within a second), then 0.2, 0.3, 0.45 ... up to
        ``RECONNECT_MAX_DELAY`` s, jittered so that replicas spread out."""
        chosen = min(servers, key=lambda s: s.reconnects) if servers else None
        n = self.state.failures
        delay = 0.0 if n == 0 else min(0.2 * 1.5 ** (n - 1), RECONNECT_MAX_DELAY) * random.uniform(0.8, 1.0)
        return chosen, delay


def _is_connect_error(e: BaseException) -> bool:
    import nats.errors

    if isinstance(e, nats.errors.AuthorizationError | nats.errors.NoServersError):
        return True
    text = str(e).lower()
    return isinstance(e, nats.errors.Error) and any(
        k in text for k in ("authorization", "authentication", "tls", "certificate", "connection")
    )


def retry_delay(attempt: int) -> float:
    """Seconds before connect round ``attempt`` + 1 (attempt counts from 1): 1, 2, 4 ... 30."""
    return float(min(FIRST_RETRY * 2 ** (attempt - 1), MAX_RETRY) * random.uniform(0.9, 1.0))


# -- what the server offers ------------------------------------------------------------------


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``2.11.10`` (or ``v2.12.0-beta.1``) -> (2, 11, 10); None when it is no version."""
    m = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _dotted(v: tuple[int, int, int]) -> str:
    return ".".join(str(x) for x in v)


async def check_server(nc: Any, role: str, *, schedules: bool = True, timeout: float = 5.0) -> None:
    """Refuse, with one line naming what was found and what is needed, a nats-server this process
    cannot work with: JetStream off (for the server or for this account), or (``schedules``) a
    version older than ``MIN_SERVER_VERSION``, on which timers and schedules never fire."""
    info = getattr(nc, "_server_info", None) or {}
    where = redact_url(nc.connected_url.geturl()) if getattr(nc, "connected_url", None) else "?"
    version_text = info.get("version")
    if schedules:
        version = parse_version(version_text)
        if version is None or version < MIN_SERVER_VERSION:
            raise DeploymentError(
                f"nats-server {version_text or '(unknown version)'} at {where} is too old: noetl {role} "
                f"needs nats-server {_dotted(MIN_SERVER_VERSION)} or later for {WHY_VERSION}; upgrade "
                "NATS (the Helm chart's bundled NATS: nats.container.image.tag)"
            )
    await check_jetstream(nc, role, where, timeout=timeout)


async def check_jetstream(nc: Any, role: str, where: str | None = None, *, timeout: float = 5.0) -> None:
    """JetStream answers for this connection's account ($JS.API.INFO): a server with JetStream
    on can still leave it off for the account the credentials log into."""
    import nats.errors
    import nats.js.errors

    where = where or (redact_url(nc.connected_url.geturl()) if getattr(nc, "connected_url", None) else "?")
    info = getattr(nc, "_server_info", None) or {}
    if info and not info.get("jetstream", False):
        raise DeploymentError(
            f"nats-server {info.get('version', '')} at {where} has JetStream disabled: noetl {role} "
            "needs JetStream; start nats-server with -js (or `jetstream {}` in its config)"
        )
    try:
        await nc.jetstream(timeout=timeout).account_info()
    except nats.js.errors.ServiceUnavailableError:
        raise DeploymentError(
            f"JetStream does not answer at {where}: noetl {role} needs nats-server with JetStream "
            "enabled (-js, or `jetstream {}` in its config) for this account"
        ) from None
    except nats.js.errors.APIError as e:
        raise DeploymentError(
            f"JetStream is not available to this account at {where} ({describe(e)}): noetl {role} "
            "needs JetStream; enable it for the account (`jetstream: enabled` in the account's config)"
        ) from None
    except (nats.errors.NoRespondersError, nats.errors.TimeoutError, TimeoutError) as e:
        raise DeploymentError(
            f"JetStream does not answer at {where} ({describe(e)}): noetl {role} needs nats-server "
            "with JetStream enabled (-js, or `jetstream {}` in its config)"
        ) from None
