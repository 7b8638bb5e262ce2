"""Restate 1.7 on this machine: its server, a TypeScript SDK endpoint and a Python SDK endpoint.

Everything is installed on first use from the package registries into ``bench/.peers/restate``
(git-ignored): the server binary ships in the npm package ``@restatedev/restate-server`` (its
``linux-x64`` variant), the TypeScript SDK is ``@restatedev/restate-sdk`` (run as the plain ES
module ``service.mjs``: no compile step), the Python SDK is ``restate-sdk`` from PyPI served by
hypercorn (``service_py.py``). Both endpoints implement the same two handlers, ``chain`` (n
durable steps one after another) and ``loop`` (n durable steps, at most ``width`` in flight); a
durable step is ``ctx.run``, whose result the server journals before the handler goes on, the
closest Restate has to a step whose outcome is stored.

The server runs single-node on loopback ports with its own base directory; ``fsync=False``
turns off the fsync of its log and log-server WALs (``rocksdb-disable-wal-fsync``), which is
what JetStream's default (``sync_interval`` 2 min) compares with; ``fsync=True`` keeps Restate's
default, which fsyncs. When npm, node or the install fails, :class:`PeerUnavailable` says why
and the scenario leaves a note instead of a number.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench.cluster import vm_hwm_mib
from noetl.host.natsserver import free_port

HERE = Path(__file__).resolve().parent
HOME = HERE.parent.parent / ".peers" / "restate"
SERVER_VERSION = "1.7.12"
TS_SDK_VERSION = "1.17.2"
PY_REQUIREMENTS = ["restate-sdk>=1.2,<2", "hypercorn>=0.17"]
SERVICES = {"ts": "BenchTs", "py": "BenchPy"}


class PeerUnavailable(Exception):
    """Restate cannot be installed or started here; the message says why."""


def _run(what: str, cmd: list[str], cwd: Path | None = None, timeout: float = 900) -> None:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise PeerUnavailable(f"`{what}` failed: {e}") from e
    if p.returncode != 0:
        tail = [ln for ln in (p.stderr + p.stdout).splitlines() if ln.strip() and "WARN" not in ln]
        raise PeerUnavailable(f"`{what}` failed: {' | '.join(tail[-3:])[:400]}")


def ensure_installed() -> Path:
    """``bench/.peers/restate`` with ``node_modules`` and a venv, installed when missing; the
    marker names the versions, so changing one here reinstalls."""
    marker = HOME / "bench-installed.txt"
    want = "\n".join([SERVER_VERSION, TS_SDK_VERSION, *PY_REQUIREMENTS])
    if marker.exists() and marker.read_text() == want:
        return HOME
    for tool in ("npm", "node"):
        if shutil.which(tool) is None:
            raise PeerUnavailable(f"no `{tool}` on PATH (the Restate server and TS SDK come from npm)")
    shutil.rmtree(HOME, ignore_errors=True)
    HOME.mkdir(parents=True)
    print(f"bench: installing Restate into {HOME} (first use) ...", file=sys.stderr, flush=True)
    pkg = {
        "name": "noetl-bench-restate",
        "private": True,
        "type": "module",
        "dependencies": {
            "@restatedev/restate-server": SERVER_VERSION,
            "@restatedev/restate-sdk": TS_SDK_VERSION,
        },
    }
    (HOME / "package.json").write_text(json.dumps(pkg, indent=2))
    _run("npm install", ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error"], cwd=HOME)
    _run("python -m venv", [sys.executable, "-m", "venv", str(HOME / "py")])
    pip = [str(HOME / "py/bin/pip"), "install", "-q", *PY_REQUIREMENTS]
    _run(f"pip install {' '.join(PY_REQUIREMENTS)}", pip)
    if not server_binary().exists():
        raise PeerUnavailable(f"npm installed no restate-server binary for this machine at {server_binary()}")
    marker.write_text(want)
    return HOME


def server_binary() -> Path:
    return HOME / "node_modules/@restatedev/restate-server-linux-x64/bin/restate-server"


def _config(base: Path, ports: dict[str, int], fsync: bool) -> str:
    lines = [
        'node-name = "bench"',
        f'base-dir = "{base}"',
        f'bind-address = "127.0.0.1:{ports["fabric"]}"',
        'listen-mode = "tcp"',
        "disable-telemetry = true",
        'log-filter = "warn"',
        "[ingress]",
        f'bind-address = "127.0.0.1:{ports["ingress"]}"',
        "[admin]",
        f'bind-address = "127.0.0.1:{ports["admin"]}"',
        "disable-web-ui = true",
    ]
    if not fsync:
        lines += ["[bifrost.local]", "rocksdb-disable-wal-fsync = true"]
        lines += ["[log-server]", "rocksdb-disable-wal-fsync = true"]
    return "\n".join(lines) + "\n"


def _http(url: str, body: dict[str, Any] | None = None, timeout: float = 5) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")


class Restate:
    """``with Restate(fsync=False) as r:`` a running server with both SDK endpoints registered;
    ``r.ingress`` is the URL handlers are called on (``{ingress}/BenchTs/chain``)."""

    def __init__(self, *, fsync: bool = False) -> None:
        self.fsync = fsync
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._dir = Path(tempfile.mkdtemp(prefix="bench-restate-"))
        self.ports = {k: free_port() for k in ("fabric", "ingress", "admin", "ts", "py")}
        self.ingress = f"http://127.0.0.1:{self.ports['ingress']}"

    def _start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> None:
        log = (self._dir / f"{name}.log").open("wb")
        self.procs[name] = subprocess.Popen(
            cmd, stdout=log, stderr=log, cwd=HOME, env={**os.environ, **(env or {})}
        )

    def _wait(self, name: str, ready: Any, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[name].poll() is not None:
                tail = (self._dir / f"{name}.log").read_bytes()[-400:].decode(errors="replace")
                raise PeerUnavailable(f"restate {name} exited with {self.procs[name].returncode}: {tail}")
            try:
                if ready():
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise PeerUnavailable(f"restate {name} not ready within {timeout:.0f} s")

    def __enter__(self) -> Restate:
        ensure_installed()
        try:
            cfg = self._dir / "restate.toml"
            cfg.write_text(_config(self._dir / "data", self.ports, self.fsync))
            self._start("server", [str(server_binary()), "-c", str(cfg), "--no-logo"])
            # copied beside node_modules: Node resolves an ES module's imports from its own folder
            shutil.copyfile(HERE / "service.mjs", HOME / "service.mjs")
            self._start("ts", ["node", str(HOME / "service.mjs"), str(self.ports["ts"])])
            self._start(
                "py",
                [str(HOME / "py/bin/hypercorn"), "service_py:app", "--bind", f"127.0.0.1:{self.ports['py']}"],
                {"PYTHONPATH": str(HERE)},
            )
            admin = f"http://127.0.0.1:{self.ports['admin']}"
            self._wait("server", lambda: _http(f"{admin}/health") is None or True)  # raises until up
            for sdk in ("ts", "py"):
                uri = f"http://127.0.0.1:{self.ports[sdk]}"
                self._wait(sdk, lambda uri=uri: bool(_http(f"{admin}/deployments", {"uri": uri})))
            return self
        except BaseException:
            self.close()
            raise

    def peak_rss_mib(self) -> dict[str, float]:
        """Peak RSS of the server and of each SDK endpoint process (MiB)."""
        return {name: vm_hwm_mib(p.pid) for name, p in self.procs.items() if p.poll() is None}

    def close(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __exit__(self, *exc: object) -> None:
        self.close()
