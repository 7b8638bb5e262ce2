"""Issue 19 through a real server, worker and nats-server: what a task prints is in its
``task.done`` event (masked, by reference when large), and `noetl logs`, the HTTP API,
`noetl events` and `noetl status` show it and the loops' counters."""

from __future__ import annotations

import asyncio
import io
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from noetl.cli.progress import Progress, run_with_progress
from noetl.client.run import run_and_wait
from noetl.events.bus import read_execution_events
from noetl.events.nats_port import NatsBus
from noetl.events.objects import is_reference
from noetl.server.api import ApiServer
from noetl.server.api.queries import execution_logs
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from noetl.worker.output import INLINE_OUTPUT_BYTES
from noetl.worker.service import Worker

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "user-" + uuid.uuid4().hex

PRINTER = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: printer, path: tests/printer}
keychain: [{name: CRED, kind: secret}]
workflow:
  - step: start
    tool:
      - name: talk
        kind: python
        args: {token: "{{ keychain.CRED.token }}"}
        code: |
          import logging, sys
          def main(token):
              print("hello from the task")
              print("the token is", token)
              sys.stderr.write("to stderr\\n")
              logging.getLogger("etl").warning("careful")
              return 1
      - name: quiet
        kind: noop
    next: {arcs: [{step: crunch}]}
  - step: crunch
    loop: {in: "{{ range(6) | list }}", iterator: x, spec: {mode: parallel, max_in_flight: 3}}
    tool:
      - name: work
        kind: python
        args: {x: "{{ iter.x }}"}
        code: |
          def main(x):
              print("item", x)
              if x == 5:
                  print("z" * 20000)
              return x
"""


@pytest.fixture
async def stack(nc: Any) -> AsyncIterator[dict[str, Any]]:
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    name, secret = f"tok_{uuid.uuid4().hex[:6]}", "Tok3n-" + uuid.uuid4().hex
    await creds.put(name, "secret", {"token": secret}, {"paths": ["*"], "inline": True})
    bus = NatsBus(nc)
    server, worker = Server(bus, credentials=creds), Worker(bus, concurrency=4, credentials=creds)
    await server.start()
    await worker.start()
    api = ApiServer(
        server.bus, server.requests, server.catalog, creds,
        host="127.0.0.1", port=0, token=TOKEN, admin_token="",
    )
    await api.start()
    try:
        request = {"request_id": uuid.uuid4().hex, "playbook": PRINTER.replace("CRED", name)}
        out = await run_and_wait(NatsBus(nc), request, timeout=60)
        assert out["status"] == "success", out
        yield {"api": api, "nc": nc, "secret": secret, "execution_id": out["execution_id"]}
    finally:
        await api.stop()
        await worker.stop(drain=False)
        await server.stop()


async def noetl(url: str, *args: str) -> tuple[int, str, str]:
    """The command as a person types it (in a process of its own, the loop stays free)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "noetl.cli.main",
        *args,
        "--nats-url",
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_task_output_is_in_the_event_masked_and_by_reference_when_large(stack: dict[str, Any]) -> None:
    js = stack["nc"].jetstream()
    events = await read_execution_events(NatsBus.of(js), stack["execution_id"])
    assert stack["secret"] not in json.dumps(events)
    done = [e for e in events if e["name"] == "task.done"]
    talk = next(e for e in done if e["entity_id"] == "talk")
    assert talk["payload"]["output"] == (
        "hello from the task\nthe token is ***\nto stderr\nWARNING etl: careful\n"
    )
    quiet = next(e for e in done if e["entity_id"] == "quiet")
    assert "output" not in quiet["payload"]  # nothing printed: no field
    works = {e["payload"].get("index"): e["payload"]["output"] for e in done if e["entity_id"] == "work"}
    assert works[0] == "item 0\n"
    assert is_reference(works[5]) and works[5]["size"] > INLINE_OUTPUT_BYTES
    started = [e for e in events if e["name"] == "task.started" and e["entity_id"] == "work"]
    assert sorted(e["payload"]["index"] for e in started) == list(range(6))


async def test_noetl_logs_and_the_api_show_it(stack: dict[str, Any], nats_server: Any) -> None:
    eid, url = stack["execution_id"], nats_server.url
    logs = await execution_logs(NatsBus(stack["nc"]), eid)
    assert logs is not None and [(e["step"], e["task"], e.get("index")) for e in logs][:1] == [
        ("start", "talk", None)
    ]
    big = next(e for e in logs if e.get("index") == 5)
    assert big["output"].startswith("item 5\n" + "z" * 100)  # read back from the object store

    code, out, err = await noetl(url, "logs", eid)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[:4] == [
        "start.talk | hello from the task",
        "start.talk | the token is ***",
        "start.talk | to stderr",
        "start.talk | WARNING etl: careful",
    ]
    assert "crunch[3].work | item 3" in lines and f"crunch[5].work | {'z' * 20000}" in lines
    assert stack["secret"] not in out

    code, out, err = await noetl(url, "logs", eid, "--step", "crunch", "--json")
    assert code == 0, err
    entries = json.loads(out)
    assert sorted(e["index"] for e in entries) == list(range(6))
    assert {e["step"] for e in entries} == {"crunch"}

    code, out, err = await noetl(url, "logs", uuid.uuid4().hex)
    assert code == 2 and "no execution" in err

    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=stack["api"].url, headers=auth, timeout=30) as http:
        r = await http.get(f"/api/executions/{eid}/logs", params={"step": "start"})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["execution_id"] == eid and [e["task"] for e in body["logs"]] == ["talk"]
        assert "the token is ***" in body["logs"][0]["output"]
        assert (await http.get(f"/api/executions/{uuid.uuid4().hex}/logs")).status_code == 404
        assert (await http.get("/api/executions/a.b*/logs")).status_code == 400


async def test_noetl_events_and_status_show_steps_iterations_and_loop_counters(
    stack: dict[str, Any], nats_server: Any
) -> None:
    eid, url = stack["execution_id"], nats_server.url
    code, out, err = await noetl(url, "events", eid)
    assert code == 0, err
    lines = out.splitlines()
    done = next(line for line in lines if " task.done " in line and "crunch[4].work" in line)
    assert done.split()[3] == "success" and "output: 1 line(s)" in done
    assert any("loop.done" in line and "6 done, 0 failed of 6" in line for line in lines)
    code, out, err = await noetl(url, "events", eid, "--json")
    assert code == 0, err
    assert all(json.loads(line)["execution_id"] == eid for line in out.splitlines())

    code, out, err = await noetl(url, "status", eid)
    assert code == 0, err
    assert "  crunch: done\n    loop: 6 done, 0 failed of 6\n" in out
    code, out, err = await noetl(url, "status", eid, "--json")
    assert json.loads(out)["loops"] == {
        "crunch": [{"status": "done", "total": 6, "done": 6, "failed": 0, "in_flight": 0}]
    }


SHOUT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: shout, path: tests/shout}
workflow:
  - step: start
    tool:
      - name: say
        kind: python
        code: |
          print("hello")
          result = 2
    next: {arcs: [{step: many}]}
  - step: many
    loop: {in: "{{ range(25) | list }}", iterator: x}
    tool: [{name: t, kind: noop}]
"""


class FakeTTY(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("live", [True, False], ids=["terminal", "pipe"])
async def test_run_with_progress_draws_the_execution(nc: Any, services: Any, live: bool) -> None:
    stream = FakeTTY() if live else io.StringIO()
    progress = Progress(stream, live=live, width=120)
    request = {"request_id": uuid.uuid4().hex, "playbook": SHOUT}
    out = await run_with_progress(NatsBus(nc), request, 60, progress)
    assert out["status"] == "success", out
    text = stream.getvalue()
    if live:
        assert "start.say | hello\x1b[0m\n" in text
        assert "\u2713\x1b[0m many  25 done of 25" in text
        assert text.endswith(("\n", "\r\x1b[K"))  # no status line left before the summary
    else:
        assert text == "start.say | hello\n"  # a pipe gets the task output and nothing else


def test_noetl_run_outside_a_terminal_prints_task_output_and_json_unchanged(tmp_path: Path) -> None:
    f = tmp_path / "shout.yaml"
    f.write_text(SHOUT)
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", str(f), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["status"] == "success"
    assert "start.say | hello\n" in p.stderr and "\r" not in p.stderr and "\x1b[" not in p.stderr
