"""Upstream NoETL playbooks, migrated, give the result of the canonical playbook written by hand.

Each `tests/fixtures/upstream/<name>.yaml` is written in upstream NoETL's dialect (one construct,
or several together) and `<name>.expected.yaml` says the same thing in this engine's DSL. Both
run on the in-memory bus (a server and a worker, tests/support.py) with the same payload, and
must end the same way with the same result: the translation keeps the meaning, not just
validity. A fixture that needs an HTTP endpoint gets `api_url` of a local one in its payload.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.dsl import validate_text
from noetl.dsl.migrate import migrate_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
PAIRS = sorted(p.name.removesuffix(".expected.yaml") for p in FIXTURES.glob("*.expected.yaml"))
NEEDS_PG = {"postgres_shape"}


class _Echo(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "items": [{"id": 1}, {"id": 2}]}).encode()
        status = 404 if self.path.startswith("/missing") else 200
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api_url() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()


async def _run(bus: Any, text: str, payload: dict[str, Any]) -> dict[str, Any]:
    out = await run_and_wait(
        bus, {"request_id": uuid.uuid4().hex, "playbook": text, "payload": payload}, timeout=30
    )
    return {"status": out["status"], "result": out["result"], "error": out.get("error")}


@pytest.mark.parametrize("name", [p for p in PAIRS if p not in NEEDS_PG])
async def test_migrated_runs_like_the_hand_written(
    name: str, bus: Any, services: Any, api_url: str
) -> None:
    source = FIXTURES / f"{name}.yaml"
    migrated = migrate_text(source.read_text(), str(source))
    assert migrated.dialect == "upstream", f"{name}: not detected as upstream"
    assert not migrated.untranslated, [str(n) for n in migrated.untranslated]
    assert migrated.text is not None and not migrated.problems, [str(p) for p in migrated.problems]
    expected = (FIXTURES / f"{name}.expected.yaml").read_text()
    assert not validate_text(expected, f"{name}.expected.yaml")
    payload = {"api_url": api_url}
    got, want = await _run(bus, migrated.text, payload), await _run(bus, expected, payload)
    assert got == want, f"{name}:\nmigrated: {got}\nexpected: {want}\n---\n{migrated.text}"
    assert want["status"] == "success", want


@pytest.mark.parametrize("name", PAIRS)
def test_migrating_twice_changes_nothing(name: str) -> None:
    source = FIXTURES / f"{name}.yaml"
    once = migrate_text(source.read_text(), str(source))
    assert once.text is not None
    for dialect in ("auto", "upstream"):  # detected or not, the output has nothing left to translate
        twice = migrate_text(once.text, str(source), dialect=dialect)
        assert twice.text == once.text and not twice.notes, [str(n) for n in twice.notes]


def _pg_up(dsn: str) -> bool:
    import asyncio

    import asyncpg

    async def probe() -> bool:
        try:
            conn = await asyncio.wait_for(asyncpg.connect(dsn), 3)
        except Exception:
            return False
        await conn.close()
        return True

    return asyncio.run(probe())


@pytest.mark.parametrize("name", sorted(NEEDS_PG))
def test_migrated_postgres_runs_like_the_hand_written(name: str, pg_dsn: str, tmp_path: Path) -> None:
    """Through `noetl run` (credentials come from a file there), against the test PostgreSQL."""
    import subprocess
    import sys

    if not _pg_up(pg_dsn):
        pytest.skip("no PostgreSQL at NOETL_TEST_PG_DSN")
    creds = tmp_path / "credentials.yaml"
    creds.write_text(json.dumps({"pg_test": {"kind": "postgres_credential", "data": {"dsn": pg_dsn}}}))
    migrated = tmp_path / "migrated.yaml"
    cli = [sys.executable, "-m", "noetl.cli.main"]
    done = subprocess.run([*cli, "migrate", str(FIXTURES / f"{name}.yaml"), "-o", str(migrated)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    results = []
    for playbook in (migrated, FIXTURES / f"{name}.expected.yaml"):
        run = subprocess.run([*cli, "run", str(playbook), "--credentials", str(creds), "--json"],
                             capture_output=True, text=True, timeout=120)
        out = json.loads(run.stdout)
        results.append((out["status"], out["result"]))
    assert results[0] == results[1] and results[0][0] == "success", results
