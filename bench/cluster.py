"""A private nats-server with ``noetl server`` and ``noetl worker`` as separate processes.

Separate processes because two of the goals are per process (peak RSS of the server and of a
worker) and because that is how the engine is deployed: the server and the worker then use one
core each instead of sharing one event loop. Peak RSS is the kernel's high-water mark
(``VmHWM`` in ``/proc/<pid>/status``), read just before the process is stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from noetl.events.bus import connect
from noetl.events.streams import ensure_all
from noetl.host.natsserver import NatsServer

BIN = Path(sys.executable).parent
FAILED_LOGS = Path(__file__).resolve().parent / "results"
_SERVER_ARGS: list[str] | None = None


def server_args() -> list[str]:
    """``--http-port 0`` when the server has an HTTP API, so two clusters never share a port."""
    global _SERVER_ARGS
    if _SERVER_ARGS is None:
        p = subprocess.run([str(BIN / "noetl"), "server", "--help"], capture_output=True, text=True)
        _SERVER_ARGS = ["--http-port", "0"] if "--http-port" in p.stdout else []
    return _SERVER_ARGS


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process so far (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def vm_hwm_mib(pid: int) -> float:
    """Peak resident set size of a live process, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise LookupError(f"no VmHWM for pid {pid}")


class Service:
    """One ``noetl server`` or ``noetl worker`` process, its stderr in a log file."""

    def __init__(self, role: str, args: list[str], log_path: Path, env: dict[str, str] | None = None) -> None:
        self.role = role
        self.log_path = log_path
        self._log = self.log_path.open("wb")
        # console lines: the "running against" line wait_ready looks for is a plain stderr line
        # there, where with JSON logs (the default off a terminal) it is an INFO record that the
        # WARNING level drops
        env = {**os.environ, "NOETL_LOG_LEVEL": "WARNING", "NOETL_LOG_FORMAT": "console", **(env or {})}
        self.proc = subprocess.Popen(
            [str(BIN / "noetl"), role, *args], stdout=subprocess.DEVNULL, stderr=self._log, env=env
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        """The CLI prints ``noetl <role> running`` once its consumers are declared."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"noetl {self.role} exited: {self.tail()}")
            if b"running against" in self.log_path.read_bytes():
                return
            time.sleep(0.02)
        raise TimeoutError(f"noetl {self.role} not ready within {timeout} s: {self.tail()}")

    def tail(self, n: int = 2000) -> str:
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def peak_rss_mib(self) -> float:
        return vm_hwm_mib(self.proc.pid)

    def stop(self, grace: float = 2.0) -> bool:
        """SIGTERM, then SIGKILL after ``grace`` seconds; True when it stopped by itself.

        The grace is short because a benchmark has nothing to lose once its numbers are read,
        and a service stuck in shutdown must not add its time-out to every scenario.
        """
        clean = True
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                clean = False
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return clean


class Cluster:
    """``async with Cluster(concurrency=64) as c:`` gives ``c.nc`` connected to a fresh nats-server.

    With ``nats_urls`` it uses those nodes (a JetStream cluster someone else started and stops)
    instead, and passes the comma-separated list to the services; ``replicas`` declares every
    stream with that many copies and sets ``NOETL_REPLICAS`` for the services; ``servers`` starts
    that many ``noetl server`` replicas (they split the partitions through leases).
    """

    def __init__(
        self,
        *,
        concurrency: int = 64,
        workers: int = 1,
        servers: int = 1,
        nats_urls: list[str] | None = None,
        replicas: int | None = None,
    ) -> None:
        self.concurrency = concurrency
        self.workers = workers
        self.servers = servers
        self.nats_urls = nats_urls
        self.replicas = replicas
        self.nats: NatsServer | None = None
        self.server: Service | None = None  # the first server replica
        self.server_procs: list[Service] = []
        self.worker_procs: list[Service] = []
        self.nc: Any = None
        self._log_dir = tempfile.mkdtemp(prefix="noetl-bench-")
        self._url = ""

    @property
    def env(self) -> dict[str, str]:
        return {"NOETL_REPLICAS": str(self.replicas)} if self.replicas else {}

    def add_server(self) -> Service:
        """Start one more ``noetl server`` replica (not waited for: ``wait_ready``)."""
        log = Path(self._log_dir) / f"server{len(self.server_procs) or ''}.log"
        svc = Service("server", ["--nats-url", self._url, *server_args()], log, self.env)
        self.server_procs.append(svc)
        self.server = self.server or svc
        return svc

    async def __aenter__(self) -> Cluster:
        try:
            if self.nats_urls is None:
                self.nats = NatsServer().start()
            urls = self.nats_urls or [self.nats.url]
            self._url = ",".join(urls)
            self.nc = await connect(urls, name="noetl-bench")
            # once, so the services do not race to create
            await ensure_all(self.nc.jetstream(), self.replicas)
            logs = Path(self._log_dir)
            for _ in range(self.servers):
                self.add_server()
            for i in range(self.workers):
                args = ["--nats-url", self._url, "--concurrency", str(self.concurrency)]
                self.worker_procs.append(Service("worker", args, logs / f"worker{i}.log", self.env))
            for svc in [*self.server_procs, *self.worker_procs]:
                await asyncio.to_thread(svc.wait_ready)
            return self
        except BaseException:
            await self.close()
            raise

    def peak_rss_mib(self) -> dict[str, float]:
        """``{"server": MiB, "worker": MiB}`` (the largest worker when there are several)."""
        out: dict[str, float] = {}
        if self.server is not None:
            out["server"] = self.server.peak_rss_mib()
        if self.worker_procs:
            out["worker"] = max(w.peak_rss_mib() for w in self.worker_procs)
        return out

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time so far of nats-server, the server and each worker (``worker``, ``worker1``, ...)."""
        out: dict[str, float] = {}
        if self.nats is not None and self.nats.proc is not None:
            out["nats-server"] = cpu_seconds(self.nats.proc.pid)
        if self.server is not None:
            out["server"] = cpu_seconds(self.server.proc.pid)
        for i, w in enumerate(self.worker_procs):
            out["worker" if i == 0 else f"worker{i}"] = cpu_seconds(w.proc.pid)
        return out

    def logs(self) -> str:
        return "\n".join(f"--- {s.log_path.name}\n{s.tail()}" for s in self._services())

    def _services(self) -> list[Service]:
        return [*self.server_procs, *self.worker_procs]

    async def close(self) -> None:
        for svc in self._services():
            svc.stop()
        if self.nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.nc.close(), 2)
        if self.nats is not None:
            self.nats.stop()
        with contextlib.suppress(OSError):
            for f in Path(self._log_dir).iterdir():
                f.unlink()
            Path(self._log_dir).rmdir()

    def keep_logs(self) -> Path:
        """Copy the services' logs where they survive the cluster: after a failed run."""
        dest = FAILED_LOGS / f"failed-{time.strftime('%Y%m%d-%H%M%S')}"
        dest.mkdir(parents=True, exist_ok=True)
        for svc in self._services():
            if svc.log_path.exists():
                (dest / svc.log_path.name).write_bytes(svc.log_path.read_bytes())
        return dest

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            with contextlib.suppress(OSError):
                print(f"bench: service logs kept in {self.keep_logs()}", file=sys.stderr)
        await self.close()
