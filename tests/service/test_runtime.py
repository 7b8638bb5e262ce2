"""The runtime registry (KV ``noetl_runtime`` with a TTL), ``noetl server``'s operations wiring and
the operations commands of the CLI, on real nats-servers."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.cli.main import build_parser
from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.bus import connect
from noetl.events.nats_port import NatsBus
from noetl.events.runtime import RuntimeRegistrar, list_runtime
from noetl.server.api.launch import start_operations
from noetl.server.service import Server
from noetl.store.credentials import generate_key
from noetl.worker.service import Worker

ROOT = Path(__file__).resolve().parents[2]

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: rt, path: tests/runtime/rt}
workflow:
  - step: start
    tool: {kind: noop, result: 7}
"""


async def until(check: Any, attempts: int = 300) -> Any:
    """Poll an async check until it returns something truthy (bounded: never hangs a test)."""
    for _ in range(attempts):
        got = await check()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("condition never held")


async def test_heartbeats_refresh_and_a_silent_process_expires(fresh_nats) -> None:
    nc = await connect(fresh_nats.url)
    js = nc.jetstream()
    state = {"running": 0}
    quiet = RuntimeRegistrar(NatsBus.of(js), "worker", lambda: {"pool": "p", **state}, interval=0.2, ttl=1.0)
    polite = RuntimeRegistrar(NatsBus.of(js), "server", dict, interval=0.2, ttl=1.0)
    try:
        await quiet.start()
        await polite.start()
        entries = await list_runtime(NatsBus.of(js))
        assert {e["id"] for e in entries} == {quiet.id, polite.id}
        assert [e["role"] for e in await list_runtime(NatsBus.of(js), "worker")] == ["worker"]
        state["running"] = 5  # read again at every beat

        async def five() -> bool:
            return [e["running"] for e in await list_runtime(NatsBus.of(js), "worker")] == [5]

        await until(five)
        await polite.stop()  # a clean stop deregisters at once
        assert [e["id"] for e in await list_runtime(NatsBus.of(js))] == [quiet.id]
        await quiet.stop(deregister=False)  # as if killed: no one deletes the entry

        async def gone() -> bool:
            return not await list_runtime(NatsBus.of(js))

        await until(gone)  # the bucket's TTL removed it
    finally:
        await quiet.stop()
        await polite.stop()
        await nc.close()
    with pytest.raises(ValueError):
        RuntimeRegistrar(NatsBus.of(js), "worker", dict, interval=2, ttl=1)


async def test_start_operations_registers_server_and_worker(fresh_nats, monkeypatch) -> None:
    monkeypatch.delenv("NOETL_API_TOKEN", raising=False)
    nc = await connect(fresh_nats.url)
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), pool="rt", concurrency=3)
    await server.start()
    await worker.start()
    s_ops = await start_operations(NatsBus(nc), "server", server, http_port=0)
    w_ops = await start_operations(NatsBus(nc), "worker", worker)
    try:
        assert s_ops.api is not None and w_ops.api is None
        async with httpx.AsyncClient(base_url=s_ops.api.url, timeout=10) as http:
            entries = (await http.get("/api/runtime")).json()
        by_role = {e["role"]: e for e in entries}
        assert by_role["worker"]["id"] == worker.worker_id.replace(".", "-")
        assert by_role["worker"]["pool"] == "rt" and by_role["worker"]["concurrency"] == 3
        assert by_role["server"]["http"] == s_ops.api.url
        assert by_role["server"]["partitions"] == list(range(s.DEFAULT_PARTITIONS))
    finally:
        await w_ops.stop()
        await s_ops.stop()
        await worker.stop(drain=False)
        await server.stop()
    assert await list_runtime(NatsBus(nc)) == []
    await nc.close()


async def cli(nc: Any, capsys: Any, *argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args([*argv, "--nats-url", "nats://unused"])
    rc = await args.afn(nc, args)
    out = capsys.readouterr()
    return rc, out.out, out.err


async def test_operations_commands(nc, capsys, monkeypatch, tmp_path) -> None:
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=2)
    await server.start()
    await worker.start()
    reg = RuntimeRegistrar(NatsBus(nc), "worker", lambda: {"pool": "cli-pool", "concurrency": 2})
    await reg.start()
    try:
        request = {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK}
        out = await run_and_wait(NatsBus(nc), request, timeout=30)
        eid = out["execution_id"]
        rc, text, _ = await cli(nc, capsys, "status", eid, "--json")
        status = json.loads(text)
        assert rc == 0 and status["status"] == "success" and status["result"] == 7
        rc, text, _ = await cli(nc, capsys, "status", eid)
        assert rc == 0 and text.startswith(f"execution {eid}: success")
        assert (await cli(nc, capsys, "status", uuid.uuid4().hex))[0] == 2  # no such execution, as for cancel

        rc, text, _ = await cli(nc, capsys, "events", eid, "--json")
        names = [json.loads(line)["name"] for line in text.splitlines()]
        assert rc == 0 and names[0] == "playbook.execution.requested" and names[-1] == "playbook.processed"
        rc, text, _ = await cli(nc, capsys, "events", eid, "--follow")  # already processed: ends at once
        assert rc == 0 and "workflow.finished" in text

        rc, text, _ = await cli(nc, capsys, "executions", "--status", "success", "--limit", "1000", "--json")
        assert rc == 0 and eid in {e["execution_id"] for e in json.loads(text)["executions"]}
        rc, text, _ = await cli(nc, capsys, "executions", "--status", "running")
        assert rc == 0 and eid not in text

        rc, text, _ = await cli(nc, capsys, "cancel", eid, "--reason", "late")
        assert rc == 0 and json.loads(text) == {"execution_id": eid, "cancel": "requested"}

        rc, text, _ = await cli(nc, capsys, "workers", "--json")
        assert rc == 0 and reg.id in {e["id"] for e in json.loads(text)}
        rc, text, _ = await cli(nc, capsys, "workers")
        assert "pool=cli-pool" in text

        monkeypatch.setenv("NOETL_CREDENTIALS_KEY", generate_key())
        name, secret = f"cli-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        rc, text, err = await cli(
            nc, capsys, "credentials", "set", name, "--kind", "http", "--data", json.dumps({"token": secret}),
            "--anonymous",
        )
        assert rc == 0 and secret not in text + err
        rc, text, _ = await cli(nc, capsys, "credentials", "list")
        assert f"{name}\thttp" in text.splitlines() and secret not in text
        data_file = tmp_path / "cred.yaml"
        data_file.write_text(f"user: app\npassword: {secret}\n")
        rc, text, err = await cli(
            nc, capsys, "credentials", "set", name + "-f", "--data-file", str(data_file), "--anonymous"
        )
        assert rc == 0 and secret not in text + err
        assert f"{name}-f\tsecret" in (await cli(nc, capsys, "credentials", "list"))[1].splitlines()
        rc, _, err = await cli(nc, capsys, "credentials", "set", name, "--data", "[1]", "--anonymous")
        assert rc == 2 and "mapping" in err
        rc, _, err = await cli(nc, capsys, "credentials", "set", "bad name", "--data", "{}", "--anonymous")
        assert rc == 2 and "invalid" in err
        rc, text, _ = await cli(nc, capsys, "credentials", "delete", name, "--anonymous")
        assert rc == 0 and f"{name}\thttp" not in (await cli(nc, capsys, "credentials", "list"))[1]
        assert (await cli(nc, capsys, "credentials", "delete", name, "--anonymous"))[0] == 1
    finally:
        await reg.stop()
        await worker.stop(drain=False)
        await server.stop()


def test_noetl_server_serves_http_on_a_free_port(fresh_nats) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_API_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "noetl.cli.main", "server", "--nats-url", fresh_nats.url, "--http-port", "0"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines: queue.Queue[str] = queue.Queue()
        stderr = proc.stderr

        def pump() -> None:
            for x in stderr:
                lines.put(x)

        threading.Thread(target=pump, daemon=True).start()
        url, seen = None, []
        while url is None:
            line = lines.get(timeout=30)
            seen.append(line)
            record = json.loads(line)  # stderr is not a terminal: JSON lines only, nothing else
            if "HTTP API on " in record["event"]:
                url = record["url"]
        assert url.startswith("http://127.0.0.1:"), seen
        assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "ok"}
        assert httpx.get(f"{url}/ready", timeout=10).status_code == 200
        runtime = httpx.get(f"{url}/api/runtime", timeout=10).json()
        assert [e["role"] for e in runtime] == ["server"] and runtime[0]["http"] == url
        r = httpx.post(f"{url}/api/executions", json={"playbook": PLAYBOOK}, timeout=10)
        assert r.status_code == 202  # no worker: it stays running, and SIGTERM must still stop the server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
