"""`noetl run`: a private nats-server, one server and one worker in one process.

Everything runs on the same code paths as a production deployment (the request goes through
``noetl.requests.execute``, decisions through the event stream, work through the command stream);
only the processes are folded into one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from pathlib import Path
from typing import Any

from noetl.events.bus import connect
from noetl.events.catalog import Catalog
from noetl.events.natsserver import NatsServer
from noetl.events.streams import ensure_all

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


async def run_embedded(
    text: str,
    file: str,
    payload: dict[str, Any],
    *,
    credentials_file: str | None,
    catalog_dir: str | None,
    timeout: float | None = None,
) -> dict[str, Any]:
    from noetl.events.credentials import CredentialStore, generate_key, load_credentials_file
    from noetl.server.client import run_and_wait
    from noetl.server.service import Server
    from noetl.worker.service import Worker

    ns = NatsServer().start()
    nc = None
    server = worker = None
    try:
        nc = await connect(ns.url, name="noetl-run")
        js = nc.jetstream()
        await ensure_all(js)
        creds = await CredentialStore.open(js, generate_key())
        if credentials_file:
            for name, entry in load_credentials_file(credentials_file).items():
                # a private run of the user's own file: its playbook is inline, and may use them
                scope = {"paths": ["*"], "inline": True}
                await creds.put(name, entry.get("kind", "secret"), entry.get("data") or {}, scope)
        catalog = await Catalog.open(js)
        if catalog_dir:
            await register_catalog_dir(catalog, catalog_dir)
        server = Server(nc, credentials=creds, leases=False)  # the only server of a private NATS
        worker = Worker(nc, credentials=creds, concurrency=32)
        await server.start()
        await worker.start()
        request = await _request(catalog, text, file, payload)
        return await run_and_wait(nc, request, timeout=timeout)
    finally:
        for svc in (worker, server):
            if svc is not None:
                with contextlib.suppress(Exception):
                    await svc.stop() if svc is server else await svc.stop(drain=False)
        if nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), 2)
        ns.stop()
