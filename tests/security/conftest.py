"""A deployment with principals, as a hostile user meets it: a real nats-server (the session's),
server, worker, HTTP API and NATS service, an auth file with an admin and operators of two
namespaces, and a credential scoped to ``team_a/`` whose secret no test may ever get back
unless it is entitled to it."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.events import subjects as s
from noetl.events.bus import read_messages
from noetl.events.nats_port import NatsBus
from noetl.server.api import ApiServer
from noetl.server.api.launch import start_operations
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.service import Worker

ROOT, ALICE, BOB, VIEWER = (f"{who}-{uuid.uuid4().hex}" for who in ("root", "alice", "bob", "viewer"))


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


EXFILTRATE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: exfil, path: PATH}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool: {kind: noop, result: "{{ keychain.CRED.value | reverse | join }}"}
"""


class Deployment:
    """What a test reaches: ``http`` per principal, the NATS connection, the secret to look for."""

    def __init__(self, api: ApiServer, nc: Any, cred: str, secret: str) -> None:
        self.api, self.nc, self.cred, self.secret = api, nc, cred, secret

    def http(self, token: str | None) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.api.url, headers=headers(token) if token else {}, timeout=30)

    async def all_events(self) -> list[dict[str, Any]]:
        """Every event in the log: what anyone who may read ``noetl.events.>`` sees."""
        return [ev for _, ev in await read_messages(NatsBus(self.nc), s.EVENTS_STREAM, ["noetl.events.>"])]

    async def events_of(self, execution_id: str, name: str, at_least: int = 1) -> list[dict[str, Any]]:
        """The execution's events called ``name``, once there are ``at_least`` (10 s at most)."""
        for _ in range(200):
            found = [
                e for e in await self.all_events() if e["execution_id"] == execution_id and e["name"] == name
            ]
            if len(found) >= at_least:
                return found
            await asyncio.sleep(0.05)
        return found

    def leaked(self, *texts: str) -> bool:
        """Whether the secret, or its reversal, is in any of ``texts``."""
        return any(self.secret in t or self.secret[::-1] in t for t in texts)

    async def run(self, token: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """POST an execution as ``token``; when accepted, wait for its end and return its status."""
        async with self.http(token) as http:
            r = await http.post("/api/executions", json=body)
            if r.status_code != 202:
                return r.status_code, r.json()
            eid = r.json()["execution_id"]
            async with http.stream(
                "GET", f"/api/executions/{eid}/events", headers={"Accept": "text/event-stream"}
            ) as stream:
                async for _ in stream.aiter_lines():
                    pass
            return 202, (await http.get(f"/api/executions/{eid}")).json()


@pytest.fixture
async def deployment(nc: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Deployment]:
    auth = tmp_path / "auth.yaml"
    auth.write_text(json.dumps({"principals": [
        {"name": "root", "token": ROOT, "role": "admin"},
        {"name": "alice", "token": ALICE, "role": "operator", "namespaces": ["team_a"]},
        {"name": "bob", "token": BOB, "role": "operator", "namespaces": ["team_b"]},
        {"name": "vera", "token": VIEWER, "role": "viewer", "namespaces": ["team_a", "team_b"]},
    ]}))
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    cred, secret = f"team_a_{uuid.uuid4().hex[:6]}", "sek-" + uuid.uuid4().hex
    await creds.put(cred, "secret", {"value": secret}, {"paths": ["team_a/"]})
    bus = NatsBus(nc)
    server, worker = Server(bus, credentials=creds), Worker(bus, concurrency=4, credentials=creds)
    await server.start()
    await worker.start()
    api = ApiServer(server.bus, server.requests, server.catalog, creds, host="127.0.0.1", port=0, token="",
                    admin_token="", auth_file=str(auth))
    await api.start()
    monkeypatch.setenv("NOETL_AUTH_FILE", str(auth))  # what `noetl server --auth-file` sets
    ops = await start_operations(NatsBus(nc), "server", server, http_port=-1)  # the NATS service
    try:
        yield Deployment(api, nc, cred, secret)
    finally:
        await ops.stop()
        await api.stop()
        await worker.stop(drain=False)
        await server.stop()
