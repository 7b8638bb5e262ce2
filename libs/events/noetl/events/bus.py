"""Connecting, publishing with deterministic ids, and reading an execution's events back.

Reads are ``Bus.read`` (``noetl.events.nats_port``): an ephemeral pull consumer whose creation
reply tells how many messages match, so a read ends exactly when it has them all.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Iterable
from typing import Any, cast

import nats
import nats.errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from noetl.events import subjects as s
from noetl.events.connection import (
    ConnectionLog,
    ConnectionState,
    redact_urls,
    retry_delay,
    secrets_of,
)
from noetl.events.envelope import Event, loads
from noetl.events.port import Bus
from noetl.events.publisher import Publisher


def tls_context() -> ssl.SSLContext | None:
    """TLS from NOETL_NATS_TLS_CA (server verification) and NOETL_NATS_TLS_CERT/KEY (client auth)."""
    from noetl.events.settings import setting

    ca, cert, key = (setting(f"nats_tls_{n}") for n in ("ca", "cert", "key"))
    if not (ca or cert):
        return None
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _need_nkeys(variable: str) -> None:
    """nats-py signs with the ``nkeys`` package, which it does not install: without it a
    ``.creds`` file crashed the connect with ModuleNotFoundError deep inside nats-py."""
    import importlib.util

    from noetl.dsl.errors import DeploymentError

    if importlib.util.find_spec("nkeys") is None:
        raise DeploymentError(
            f"{variable} is set but the nkeys package is missing: pip install 'noetl-jetstream[nkeys]'"
        )


def server_urls(url: str | Iterable[str]) -> list[str]:
    """``nats://a:4222,nats://b:4222`` (or a list) as a list: a process given every node of a
    cluster starts while any one of them is down, and reconnects to another when its node dies."""
    parts = url.split(",") if isinstance(url, str) else list(url)
    urls = [u.strip() for u in parts if u and u.strip()]
    if not urls:
        raise ValueError(
            "no NATS URL given: pass --nats-url nats://HOST:4222 (a comma-separated list for a cluster)"
        )
    return urls


async def connect(
    url: str | Iterable[str],
    *,
    name: str = "noetl",
    state: ConnectionState | None = None,
    **opts: Any,
) -> NATS:
    """Connect, and say so when it fails: the first failure is a WARNING with the URL (credentials
    stripped) and the cause, repeats at a back-off (``noetl.events.connection``).

    By default it never gives up: a service may start before its NATS, and a restarted
    nats-server must not stop it. Each round tries every URL given; rounds are 1, 2, 4 ... 30 s
    apart. Once connected, reconnects go on forever, the first at once, then backing off to 5 s.
    ``max_reconnect_attempts`` >= 0 (one-shot commands) makes it one round that raises instead.
    ``state``: filled in as it goes (``/health`` reads it).
    """
    urls = server_urls(url)
    kw = _connect_options(name, opts)
    limit = kw.pop("max_reconnect_attempts", -1)
    state = state if state is not None else ConnectionState(redact_urls(urls))
    state.url = redact_urls(urls)
    state.secrets = secrets_of(urls, kw)
    # a bounded connect belongs to a command that reports its own failure in one line
    report = ConnectionLog(state, name, level=logging.WARNING if limit < 0 else logging.DEBUG)
    kw.setdefault("error_cb", report.error_cb)
    kw.setdefault("disconnected_cb", report.disconnected_cb)
    kw.setdefault("reconnected_cb", report.reconnected_cb)
    kw.setdefault("reconnect_time_wait", 0.2)  # between the two tries of a URL within one round
    kw.setdefault("reconnect_to_server_handler", report.next_server)
    return await _connect_rounds(urls, kw, limit, state, report)


def _connect_options(name: str, opts: dict[str, Any]) -> dict[str, Any]:
    """nats-py's connect options from the settings (credentials, TLS, inbox prefix); the
    caller's ``opts`` win."""
    kw: dict[str, Any] = {"name": name, "connect_timeout": 5}
    from noetl.events.settings import setting

    user, password, token = setting("nats_user"), setting("nats_password"), setting("nats_token")
    if user:
        kw.update(user=user, password=password.get_secret_value() if password else None)
    if token:
        kw["token"] = token.get_secret_value()
    creds, seed = setting("nats_creds"), setting("nats_nkey_seed")
    if creds or seed:
        _need_nkeys("NOETL_NATS_CREDS" if creds else "NOETL_NATS_NKEY_SEED")
    if creds:
        kw["user_credentials"] = creds
    if seed:
        kw["nkeys_seed"] = seed
    if inbox := setting("nats_inbox_prefix"):  # a principal's NATS user may read only its own inbox
        kw["inbox_prefix"] = inbox
    tls = tls_context()
    if tls is not None:
        kw["tls"] = tls
    kw.update(opts)
    return kw


async def _connect_rounds(
    urls: list[str], kw: dict[str, Any], limit: int, state: ConnectionState, report: ConnectionLog
) -> NATS:
    """Rounds of connect attempts until one succeeds (or, with ``limit`` >= 0, the first fails)."""
    attempt = 0
    while True:
        attempt += 1
        nc = report.nc = NATS()
        before = state.failures
        try:
            # one round: every URL tried at most twice, then NoServersError
            await nc.connect(servers=urls, max_reconnect_attempts=limit if limit >= 0 else 1, **kw)
        except (nats.errors.Error, OSError, TimeoutError) as e:
            if state.failures == before:  # not seen by the error callback
                report.failed(e)
            if limit >= 0:
                raise
            with contextlib.suppress(Exception):
                await nc.close()
            await asyncio.sleep(retry_delay(attempt))
            continue
        nc.options["max_reconnect_attempts"] = limit  # from now on: reconnect forever
        report.up(nc)
        return nc


async def publish_all(
    js: JetStreamContext, messages: Iterable[tuple[str, bytes, str]], timeout: float = 10.0
) -> None:
    """Publish (subject, data, msg_id) in order and wait for every ack: one round trip for the
    batch, not one per message.

    An ack lost to a reconnect never arrives: give up on the batch and let the caller publish it
    again (same ids, so JetStream keeps one copy of each).
    """
    pub = await Publisher.of(js._nc)
    futures = [await pub.publish(subj, data, {"Nats-Msg-Id": msg_id}) for subj, data, msg_id in messages]
    if not futures:
        return
    try:
        await asyncio.wait_for(asyncio.gather(*futures), timeout)
    except BaseException:
        for f in futures:
            f.cancel()  # forgets the pending ack
        raise


async def read_messages(
    bus: Bus,
    stream: str,
    filters: list[str],
    *,
    before_seq: int | None = None,
    start_seq: int | None = None,
) -> list[tuple[int, Any]]:
    """Every message of ``stream`` matching ``filters`` (stream order), as (seq, decoded JSON)."""
    msgs = await bus.read(stream, filters, start_seq=start_seq or 1, before_seq=before_seq)
    return [(m.seq, loads(m.data)) for m in msgs]


async def read_execution_events(bus: Bus, execution_id: str) -> list[Event]:
    """One execution's events in stream order. A payload the engine sent by reference (over the
    event limit) is read back whole, so a large ``workflow.finished`` shows its result and error
    like any other."""
    from noetl.events.batches import unbatch
    from noetl.events.objects import expand

    filters = [s.execution_events_filter(execution_id)]
    events = [x for _, e in await read_messages(bus, s.EVENTS_STREAM, filters) for x in unbatch(e)]
    by_ref = [i for i, e in enumerate(events) if "payload_ref" in (e.get("payload") or {})]
    for i in by_ref:
        events[i] = cast(Event, await expand(bus, dict(events[i])))
    return events
