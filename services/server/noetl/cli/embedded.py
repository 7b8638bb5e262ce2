"""`noetl run`: a private nats-server, one server and one worker in one process.

Everything runs on the same code paths as a production deployment (the request goes through
``noetl.requests.execute``, decisions through the event stream, work through the command stream);
only the processes are folded into one. With ``--ui`` the HTTP API and its web console join them
on a free loopback port, behind a token made for this run, and stay up after the execution ends
so its page can be looked at; Ctrl-C ends the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

from noetl.cli import heap
from noetl.cli.pools import PoolWatch, playbook_pools
from noetl.events.bus import connect
from noetl.events.connection import check_server
from noetl.events.nats_port import NatsBus
from noetl.events.port import Bus
from noetl.host.natsserver import NatsServer
from noetl.store.catalog import Catalog

log = logging.getLogger("noetl.cli")


async def register_catalog_dir(catalog: Catalog, directory: str) -> int:
    n = 0
    for f in sorted(Path(directory).rglob("*.y*ml")):
        try:
            await catalog.register(f.read_text(), str(f))
            n += 1
        except Exception as e:
            log.warning("catalog: skipped %s: %s", f, e)
    return n


async def _request(catalog: Catalog, text: str, file: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The playbook inline, or by path from the private catalog when inline it would be over the
    request limit (a large playbook runs with `noetl run` as it would after `catalog register`)."""
    from noetl.events.envelope import dumps
    from noetl.server.requests import MAX_REQUEST_BYTES

    request: dict[str, Any] = {"request_id": uuid.uuid4().hex, "playbook": text, "payload": payload}
    if len(dumps(request)) <= MAX_REQUEST_BYTES:
        return request
    entry = await catalog.register(text, file)
    del request["playbook"]
    request["path"] = entry["path"]
    if entry["version"]:
        request["version"] = entry["version"]
    return request


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")) or sys.platform in (
        "darwin",
        "win32",
    )


async def until_stopped() -> None:
    """Until Ctrl-C, SIGTERM or SIGHUP, which then end the run in order, with the execution's
    result. The signals are taken on the loop: raised from a signal handler instead, they would
    stop the loop first, and the NATS client with it, so every goodbye to NATS would time out."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed = []
    for signum in (signal.SIGTERM, signal.SIGHUP):
        previous = signal.getsignal(signum)
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not on this platform
            loop.add_signal_handler(signum, stop.set)
            installed.append((signum, previous))
    try:
        await stop.wait()
    except asyncio.CancelledError:  # Ctrl-C: asyncio.run cancels the main task
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
    finally:
        for signum, previous in installed:
            loop.remove_signal_handler(signum)
            signal.signal(signum, previous)


async def start_console(bus: Bus, server: Any, worker: Any, credentials: Any) -> tuple[list[Any], str, str]:
    """The HTTP API and console on 127.0.0.1, a free port, and a token no one else knows: other
    users of a shared machine can reach a loopback port too. Returns (parts to stop, base URL,
    token)."""
    from noetl.events.runtime import RuntimeRegistrar
    from noetl.server.api import ApiServer
    from noetl.server.api.launch import start_operations

    token = secrets.token_urlsafe(24)
    api = ApiServer(
        server.bus,
        server.requests,
        server.catalog,
        credentials,
        host="127.0.0.1",
        port=0,
        token=token,
        admin_token="",
    )
    await api.start()
    parts: list[Any] = [api]
    try:
        server.observer = api.collector.observe
        registrar = RuntimeRegistrar(bus, "server", lambda: {"running": len(server.states), "http": api.url})
        await registrar.start()
        parts.append(registrar)
        parts.append(await start_operations(bus, "worker", worker))
    except BaseException:
        for part in reversed(parts):
            with contextlib.suppress(Exception):
                await part.stop()
        raise
    return parts, api.url, token


def _pools(text: str, file: str, catalog_dir: str | None) -> dict[str, list[str]]:
    """The pools the playbook and the child playbooks it can see name (``noetl.cli.pools``)."""
    from noetl.dsl.cache import parse_playbook

    try:
        return playbook_pools(parse_playbook(text, file), catalog_dir)
    except Exception:  # an invalid playbook is reported by the request, with its lines
        return {}


def _declared_kinds(text: str, file: str) -> dict[str, str]:
    """The playbook's keychain kinds by name: an entry of the credentials file written without a
    kind takes the one the playbook declares for it."""
    from noetl.dsl.cache import parse_playbook

    try:
        return {e.name: e.kind for e in parse_playbook(text, file).keychain}
    except Exception:  # an invalid playbook is reported by the request, with its lines
        return {}


async def run_embedded(
    text: str,
    file: str,
    payload: dict[str, Any],
    *,
    credentials_file: str | None,
    catalog_dir: str | None,
    timeout: float | None = None,
    ui: bool = False,
    progress: Any = None,
    nats: NatsServer | None = None,
) -> dict[str, Any]:
    """``progress``: a ``noetl.cli.progress.Progress`` that draws the execution's events;
    ``nats``: a private nats-server already launched (``noetl run`` starts it first, to boot
    while it imports and validates), else one is started here. Either is stopped here."""
    from noetl.cli.progress import run_with_progress
    from noetl.server.service import Server
    from noetl.store.credentials import CredentialStore, generate_key
    from noetl.worker.service import Worker

    ns = nats.ready() if nats is not None else NatsServer().start()
    nc = None
    server = worker = None
    console: list[Any] = []
    pool_workers: list[Any] = []  # the workers of the other pools, and the watch that starts them
    watch: Any = None
    try:
        nc = await connect(ns.url, name="noetl-run")
        # a nats-server found on PATH (Debian's is 2.9) would run playbooks whose timers never fire
        await check_server(nc, "run")
        bus = NatsBus(nc)  # the one adapter every part of this run shares
        await bus.prepare()  # once for all of them: the server and worker find it done
        creds = await CredentialStore.open(bus, generate_key())
        if credentials_file:
            await _put_credentials(creds, credentials_file, _declared_kinds(text, file))
        catalog = await Catalog.open(bus)
        if catalog_dir:
            await register_catalog_dir(catalog, catalog_dir)
        server = Server(bus, credentials=creds, leases=False)  # the only server of a private NATS
        worker = Worker(bus, credentials=creds, concurrency=32)
        await server.start()
        await worker.start()
        heap.release()  # started: what start-up built leaves the collector's view
        pools = _pools(text, file, catalog_dir)
        watch = await _start_pool_workers(bus, creds, worker.pool, pools, pool_workers)
        request = await _request(catalog, text, file, payload)
        if progress is not None:  # a waiting step's line says how to reach this NATS to signal it
            progress.nats_url = ns.url
        if not ui:
            return await run_with_progress(bus, request, timeout, progress)
        return await _run_with_console(bus, server, worker, creds, request, timeout, progress, console)
    finally:
        await _shut_down(ns, nc, server, worker, console, pool_workers, watch)


async def _put_credentials(creds: Any, credentials_file: str, kinds: dict[str, str]) -> None:
    from noetl.events.masking import weak_secrets
    from noetl.store.credentials import load_credentials_file

    for name, entry in load_credentials_file(credentials_file, kinds).items():
        # a private run of the user's own file: its playbook is inline, and may use them
        scope = {"paths": ["*"], "inline": True}
        if weak := weak_secrets(entry.get("data") or {}, entry.get("kind")):
            # a private run still works, but the masking of such a value hides data, not a secret
            print(f"noetl: warning: credential {name!r} holds {'; '.join(weak)}", file=sys.stderr)
        await creds.put(name, entry.get("kind", "secret"), entry.get("data") or {}, scope)


async def _start_pool_workers(
    bus: Any, creds: Any, own_pool: str, pools: dict[str, list[str]], pool_workers: list[Any]
) -> Any:
    """A worker for every other pool the playbook and its visible children name, and one for a
    pool only a command reveals (a child it could not see): a command never waits unserved.
    Each one started joins ``pool_workers`` at once (the caller stops them whatever happens);
    returns the watch, which joins them last."""
    from noetl.worker.service import Worker

    async def start_pool(pool: str) -> None:
        named = pools.get(pool)
        print(
            f"noetl: starting a worker for pool {pool!r}"
            + (f" ({', '.join(named[:3])})" if named else " (a command was sent to it)"),
            file=sys.stderr,
        )
        extra = Worker(bus, credentials=creds, pool=pool, concurrency=8)
        await extra.start()
        pool_workers.append(extra)

    for pool in sorted(pools):
        if pool != own_pool:
            await start_pool(pool)
    watch = PoolWatch(bus, {own_pool, *pools}, start_pool)
    await watch.start()
    pool_workers.append(watch)
    return watch


async def _run_with_console(
    bus: Any,
    server: Any,
    worker: Any,
    creds: Any,
    request: dict[str, Any],
    timeout: float | None,
    progress: Any,
    console: list[Any],
) -> dict[str, Any]:
    """The run with the web console up, until Ctrl-C; its parts join ``console`` (the caller
    stops them)."""
    from noetl.cli.progress import run_with_progress
    from noetl.events.ids import execution_id_for

    parts, base, token = await start_console(bus, server, worker, creds)
    console.extend(parts)
    link = f"{base}/ui/login?token={token}&next=/ui/executions/{execution_id_for(request['request_id'])}"
    # the token is this run's own, made a moment ago: printing it is how the person gets in
    print(f"noetl: console at {link}", file=sys.stderr)
    if _has_display():
        import webbrowser  # here: only --ui opens a browser, and the module costs every run ~2 ms

        threading.Thread(target=webbrowser.open, args=(link,), daemon=True).start()
    out = await run_with_progress(bus, request, timeout, progress)
    print(
        f"noetl: execution {out['execution_id']} {out['status']}; the console stays up at {base}/ui "
        "until Ctrl-C",
        file=sys.stderr,
    )
    await until_stopped()
    return out


async def _shut_down(
    ns: NatsServer,
    nc: Any,
    server: Any,
    worker: Any,
    console: list[Any],
    pool_workers: list[Any],
    watch: Any,
) -> None:
    """Everything the run started, stopped in the reverse order, whatever failed before."""
    for part in reversed(console):
        with contextlib.suppress(Exception):
            await part.stop()
    for extra in reversed(pool_workers):  # the watch first: it starts no worker after this
        with contextlib.suppress(Exception):
            await extra.stop(drain=False) if extra is not watch else await extra.stop()
    if worker is not None:
        with contextlib.suppress(Exception):
            await worker.stop(drain=False)
    if server is not None:
        with contextlib.suppress(Exception):
            await server.stop()
    if nc is not None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), 2)
    ns.stop()
