"""A real 3-node nats-server JetStream cluster on loopback, an HTTP recorder and `noetl server` /
`noetl worker` subprocesses pointed at the whole cluster: the pieces of the node-loss tests.

- ``NatsCluster``: three nodes (``n1``, ``n2``, ``n3``) from the binary the embedded mode uses,
  one config file and one store dir each; a node can be SIGKILLed and restarted on the same store
  dir, or SIGSTOPped (it stops answering, as behind a network cut) and SIGCONTinued.
- ``Recorder``: a local HTTP endpoint that keeps the JSON body of every POST (the side effect an
  ``http`` task has on the outside world), optionally slow to answer so runs last a while.
- ``Services``: server and worker subprocesses with short leases and their logs in files.
- Helpers to connect, submit, wait for executions without ever waiting forever, and count what
  the guarantee tests assert on.

Every process started here is stopped by the owner's ``close()`` (the fixtures call it), a
paused node is continued first so that it can be stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from noetl.events.nats_port import NatsBus
from noetl.host.natsserver import nats_server_binary

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_NAME = "noetl-test"
NODE_NAMES = ("n1", "n2", "n3")
PROBE_STREAM = "HARNESS_PROBE"

TERMINAL_EVENTS = frozenset({"step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed"})


def free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all bound at once, so none is handed out twice)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _run_in_thread(fn: Callable[[], Awaitable[Any]], timeout: float) -> Any:
    """Run a coroutine function on a private event loop in another thread, so the synchronous
    harness methods also work when called from inside a running loop (an async test)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(asyncio.wait_for(fn(), timeout))
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout + 5)
    if t.is_alive():
        raise TimeoutError(f"{fn!r} did not end within {timeout} s")
    if "error" in box:
        raise box["error"]
    return box.get("value")


async def _quiet(_: Exception) -> None:
    return None


def _process_state(pid: int) -> str | None:
    """The state letter of /proc/<pid>/stat (``T`` when stopped); None where there is no /proc."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, *, stopped: bool, timeout: float = 5.0) -> None:
    """Signals are delivered asynchronously: wait until the process has stopped (or resumed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = _process_state(pid)
        if state is None or (state in ("T", "t")) == stopped:
            return
        time.sleep(0.005)
    raise TimeoutError(f"process {pid} did not {'stop' if stopped else 'continue'} within {timeout} s")


# ---------------------------------------------------------------------------------------------
# a partition: a TCP proxy between the nodes' routes


@dataclass(eq=False)
class _Link:
    dst: str
    src: str | None
    writers: tuple[asyncio.StreamWriter, ...]

    def abort(self) -> None:
        for w in self.writers:
            with contextlib.suppress(Exception):
                w.transport.abort()


class RouteProxy:
    """One listening port per node, forwarding to that node's route port, on a private event
    loop in a thread (the test's own loop may be busy or blocked). The dialing node names itself
    in its first protocol line (``CONNECT {"name": <server id>, ...}``), so each link is known by
    both its ends and ``cut`` can drop exactly the links of the nodes it isolates, in both
    directions, and refuse new ones until the cut is lifted. Links are reset, not black-holed:
    a TCP stream cannot lose bytes in the middle, and a reset is what a peer sees soon after a
    real cut anyway (NATS route pings).
    """

    def __init__(self, ports: dict[str, tuple[int, int]], server_ids: Callable[[], dict[str, str]]) -> None:
        self.ports = ports  # node -> (proxy port, real route port)
        self._server_ids = server_ids
        self._ids: dict[str, str] = {}
        self._cut: set[str] = set()
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="route-proxy")
        self._servers: list[asyncio.Server] = []
        self.refused = 0  # links refused or cut (for the notes)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> None:
        for name, (port, _) in self.ports.items():
            server = await asyncio.start_server(functools.partial(self._serve, name), "127.0.0.1", port)
            self._servers.append(server)

    async def _name_of(self, line: bytes) -> str | None:
        if not line.startswith(b"CONNECT "):
            return None
        try:
            server_id = str(json.loads(line[8:].strip()).get("name"))
        except ValueError:
            return None
        if server_id not in self._ids:
            self._ids = await asyncio.to_thread(self._server_ids)
        return self._ids.get(server_id)

    async def _serve(self, dst: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(dst, None, (writer,))
        if dst in self._cut:
            self.refused += 1
            link.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.ports[dst][1])
        except OSError:
            link.abort()
            return
        link.writers = (writer, up_writer)
        self._links.add(link)
        down = asyncio.create_task(self._pump(up_reader, writer))
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\r\n"), 30)
            link.src = await self._name_of(line)
            if dst in self._cut or link.src in self._cut:
                self.refused += 1
                return
            up_writer.write(line)
            await self._pump(reader, up_writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            pass
        finally:
            self._links.discard(link)
            link.abort()
            down.cancel()

    @staticmethod
    async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        with contextlib.suppress(Exception):
            writer.transport.abort()

    def cut(self, names: set[str]) -> None:
        """Isolate ``names`` (reset their links, refuse new ones); ``set()`` heals every cut."""

        async def apply() -> None:
            self._cut = set(names)
            for link in list(self._links):
                if link.dst in names or link.src in names:
                    self.refused += 1
                    link.abort()

        asyncio.run_coroutine_threadsafe(apply(), self._loop).result(10)

    def close(self) -> None:
        async def shut() -> None:
            for s in self._servers:
                s.close()
            for link in list(self._links):
                link.abort()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        with contextlib.suppress(Exception):
            self._loop.close()


# ---------------------------------------------------------------------------------------------
# the NATS cluster


@dataclass
class Node:
    name: str
    port: int
    monitor_port: int
    route_port: int
    store_dir: Path
    config: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    proxy_port: int | None = None  # where the other nodes reach this node's routes (proxied)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class NatsCluster:
    """Three JetStream nodes on loopback. ``start()`` returns when every node answers /healthz,
    the cluster has a meta leader, and a client can create an R3 stream.

    With ``proxied_routes`` every route between nodes goes through a ``RouteProxy`` the test owns,
    so ``partition(name)`` can cut one node off its peers (and ``heal()`` join it again) while its
    clients stay connected to it: a network partition without root or namespaces."""

    def __init__(
        self, names: Iterable[str] = NODE_NAMES, base_dir: str | None = None, *, proxied_routes: bool = False
    ) -> None:
        self.names = list(names)
        self._own_dir = base_dir is None
        self.base = Path(base_dir or tempfile.mkdtemp(prefix="noetl-cluster-"))
        ports = free_ports(4 * len(self.names))
        self.nodes: dict[str, Node] = {}
        self.proxy: RouteProxy | None = None
        for i, name in enumerate(self.names):
            port, mon, route, proxy = ports[4 * i : 4 * i + 4]
            self.nodes[name] = Node(
                name=name,
                port=port,
                monitor_port=mon,
                route_port=route,
                store_dir=self.base / name,
                config=self.base / f"{name}.conf",
                log=self.base / f"{name}.log",
                proxy_port=proxy if proxied_routes else None,
            )
        if proxied_routes:
            self.proxy = RouteProxy(
                {n.name: (n.proxy_port, n.route_port) for n in self.nodes.values()},  # type: ignore[misc]
                self.server_ids,
            )
        for node in self.nodes.values():
            node.config.write_text(self._config(node))

    def _config(self, node: Node) -> str:
        # proxied: every node dials its peers through their proxy port and advertises its own
        # proxy port, so the routes a node learns from gossip go through the proxy too
        reach = {n.name: n.proxy_port or n.route_port for n in self.nodes.values()}
        routes = ", ".join(f'"nats-route://127.0.0.1:{p}"' for p in reach.values())
        advertise = f"  advertise: 127.0.0.1:{node.proxy_port}\n" if node.proxy_port else ""
        return (
            f'server_name: "{node.name}"\n'
            f"listen: 127.0.0.1:{node.port}\n"
            f"http: 127.0.0.1:{node.monitor_port}\n"
            "jetstream {\n"
            f'  store_dir: "{node.store_dir}"\n'
            "  max_file_store: 1G\n"
            "  max_mem: 256M\n"
            "}\n"
            "cluster {\n"
            f"  name: {CLUSTER_NAME}\n"
            f"  listen: 127.0.0.1:{node.route_port}\n"
            f"{advertise}"
            f"  routes: [{routes}]\n"
            "}\n"
        )

    # -- addresses

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes.values()]

    @property
    def url_list(self) -> str:
        return ",".join(self.urls)

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def running(self) -> list[str]:
        return [n.name for n in self.nodes.values() if n.running]

    # -- monitoring

    def _get(self, name: str, path: str, timeout: float = 1.0) -> tuple[int, Any]:
        """(status, parsed JSON body or None) of a monitoring request; (0, None) if unreachable."""
        url = f"http://127.0.0.1:{self.nodes[name].monitor_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                status, body = r.status, r.read()
        except urllib.error.HTTPError as e:
            status, body = e.code, e.read()
        except OSError:
            return 0, None
        try:
            return status, json.loads(body)
        except ValueError:
            return status, None

    def healthz(self, name: str, js_enabled_only: bool = False) -> int:
        """The HTTP status of the node's /healthz (0 when it does not answer)."""
        return self._get(name, "/healthz?js-enabled-only=true" if js_enabled_only else "/healthz")[0]

    def meta_leader(self, name: str | None = None) -> str | None:
        """The JetStream meta leader as one running node sees it (the first that answers)."""
        for n in [name] if name else self.running():
            if self.nodes[n].paused:
                continue
            status, body = self._get(n, "/jsz")
            leader = ((body or {}).get("meta_cluster") or {}).get("leader") if status == 200 else None
            if leader:
                return str(leader)
        return None

    def _wait_healthy(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            for name in list(pending):
                node = self.nodes[name]
                if not node.running:
                    raise RuntimeError(f"nats-server {name} exited: {self._log_tail(name)}")
                if self.healthz(name) == 200 and self.meta_leader(name):
                    pending.remove(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                status = {n: self.healthz(n) for n in pending}
                raise TimeoutError(f"nats-server nodes not healthy within {timeout} s: {status}")
            time.sleep(0.05)

    def _log_tail(self, name: str, size: int = 2000) -> str:
        log = self.nodes[name].log
        return log.read_text(errors="replace")[-size:] if log.exists() else ""

    # -- lifecycle

    def _spawn(self, name: str) -> None:
        node = self.nodes[name]
        node.store_dir.mkdir(parents=True, exist_ok=True)
        with node.log.open("ab") as fh:
            node.proc = subprocess.Popen(
                [nats_server_binary(), "-c", str(node.config)],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        node.paused = False

    def start(self, timeout: float = 30.0) -> NatsCluster:
        try:
            if self.proxy is not None:
                self.proxy.start()
            for name in self.names:
                self._spawn(name)
            self._wait_healthy(self.names, timeout)
            _run_in_thread(self._probe_r3_stream, timeout)
        except BaseException:
            self.close()
            raise
        return self

    async def _probe_r3_stream(self) -> None:
        """Create (then delete) an R3 stream: the cluster can place replicated assets."""
        import nats
        from nats.js.api import StorageType, StreamConfig

        nc = await nats.connect(
            self.urls, error_cb=_quiet, max_reconnect_attempts=-1, reconnect_time_wait=0.2
        )
        try:
            js = nc.jetstream(timeout=2)
            cfg = StreamConfig(
                name=PROBE_STREAM, subjects=["harness.probe"], num_replicas=3, storage=StorageType.MEMORY
            )
            while True:
                try:
                    await js.add_stream(cfg)
                    info = await js.stream_info(PROBE_STREAM)
                    if info.cluster and info.cluster.leader and len(info.cluster.replicas or []) == 2:
                        break
                except Exception:
                    pass
                await asyncio.sleep(0.1)
            await js.delete_stream(PROBE_STREAM)
        finally:
            await nc.close()

    def kill(self, name: str) -> None:
        """SIGKILL one node; its store dir stays for ``restart``."""
        node = self.nodes[name]
        if node.running:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(timeout=10)
        node.paused = False

    def stop(self, name: str, timeout: float = 10.0) -> None:
        """SIGTERM one node (continued first if paused), SIGKILL if it does not exit."""
        node = self.nodes[name]
        if node.proc is None:
            return
        if node.running:
            if node.paused:
                node.proc.send_signal(signal.SIGCONT)
            node.proc.terminate()
            try:
                node.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(timeout=10)
        node.paused = False

    def restart(self, name: str, timeout: float = 30.0) -> None:
        """Start a killed (or stopped) node again with the same config and store dir, and wait
        until its /healthz answers 200 (it has caught up with the meta leader and its streams)."""
        node = self.nodes[name]
        if node.running:
            raise RuntimeError(f"nats-server {name} is still running")
        self._spawn(name)
        self._wait_healthy([name], timeout)

    def pause(self, name: str) -> None:
        """SIGSTOP: the node stays connected on TCP but answers nothing (a network cut)."""
        node = self.nodes[name]
        if not node.running:
            raise RuntimeError(f"nats-server {name} is not running")
        assert node.proc is not None
        node.proc.send_signal(signal.SIGSTOP)
        node.paused = True
        _wait_state(node.proc.pid, stopped=True)

    def resume(self, name: str) -> None:
        node = self.nodes[name]
        if node.running and node.paused:
            assert node.proc is not None
            node.proc.send_signal(signal.SIGCONT)
            _wait_state(node.proc.pid, stopped=False)
        node.paused = False

    def server_ids(self) -> dict[str, str]:
        """Server id (a new one at every start) -> node name, from each running node's /varz."""
        ids = {}
        for name in self.running():
            if not self.nodes[name].paused:
                status, body = self._get(name, "/varz")
                if status == 200 and body and body.get("server_id"):
                    ids[str(body["server_id"])] = name
        return ids

    def routes_of(self, name: str) -> int | None:
        """How many route connections the node has (``/routez``); None when it does not answer."""
        status, body = self._get(name, "/routez")
        return int(body.get("num_routes", 0)) if status == 200 and body else None

    def partition(self, name: str) -> None:
        """Cut every route connection of ``name`` and refuse new ones until ``heal()``; its clients
        stay connected to it (they now talk to a node without peers). Needs ``proxied_routes``."""
        if self.proxy is None:
            raise RuntimeError("partition() needs NatsCluster(proxied_routes=True)")
        self.proxy.cut({name})

    def heal(self) -> None:
        if self.proxy is not None:
            self.proxy.cut(set())

    def close(self) -> None:
        if self.proxy is not None:
            with contextlib.suppress(Exception):
                self.proxy.close()
        for name in self.names:
            with contextlib.suppress(Exception):
                self.stop(name, timeout=5)
        for node in self.nodes.values():  # belt and braces: nothing may outlive the test
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                node.proc.wait()
        if self._own_dir:
            shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- streams

    @staticmethod
    async def leader_of(js: Any, stream: str, timeout: float = 5.0) -> str | None:
        """The name of the node leading ``stream`` (None while it has no leader)."""
        info = await asyncio.wait_for(js.stream_info(stream), timeout)
        return info.cluster.leader if info.cluster else None

    async def wait_leader(
        self, js: Any, stream: str, timeout: float = 20.0, *, not_on: str | None = None
    ) -> str:
        """Wait until ``stream`` has a leader (other than ``not_on``); its name."""
        deadline = time.monotonic() + timeout
        last: object = None
        while True:
            try:
                leader = await self.leader_of(js, stream, timeout=2.0)
                last = leader
                if leader and leader != not_on:
                    return leader
            except Exception as e:
                last = e
            if time.monotonic() > deadline:
                raise TimeoutError(f"{stream} has no leader (not on {not_on}) after {timeout} s: {last!r}")
            await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# the recorder


class _RecordingHandler(BaseHTTPRequestHandler):
    server: _RecordingServer

    def do_POST(self) -> None:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            raw = b""
            while True:
                size = int(self.rfile.readline().strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    break
                raw += self.rfile.read(size)
                self.rfile.readline()
        else:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        with self.server.lock:
            self.server.records.append(body)
        if self.server.delay:
            time.sleep(self.server.delay)
        out = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, format: str, *args: Any) -> None:
        return None


class _RecordingServer(ThreadingHTTPServer):
    daemon_threads = True
    # the socketserver default backlog of 5 is below the POSTs in flight (2 workers x 8): on a busy
    # machine the accept thread falls behind, SYNs are dropped, and a POST can miss its connect
    # time-out, failing an iteration for a reason that is the recorder's, not the system's
    request_queue_size = 128

    def __init__(self, delay: float) -> None:
        self.records: list[Any] = []
        self.lock = threading.Lock()
        self.delay = delay
        super().__init__(("127.0.0.1", 0), _RecordingHandler)


class Recorder:
    """Records every POST's JSON body and answers 200 ``{"ok": true}`` (after ``delay`` seconds).

    HTTP/1.0: each request closes its connection, so nothing idles in a keep-alive pool."""

    def __init__(self, delay: float = 0.0) -> None:
        self._server = _RecordingServer(delay)
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def delay(self) -> float:
        return self._server.delay

    @delay.setter
    def delay(self, value: float) -> None:
        self._server.delay = value

    @property
    def records(self) -> list[Any]:
        with self._server.lock:
            return list(self._server.records)

    def __len__(self) -> int:
        with self._server.lock:
            return len(self._server.records)

    def count_by(self, key: str) -> Counter[Any]:
        return Counter(r.get(key) if isinstance(r, dict) else None for r in self.records)

    def count_by_keys(self, *keys: str) -> Counter[tuple[Any, ...]]:
        return Counter(tuple(r.get(k) if isinstance(r, dict) else None for k in keys) for r in self.records)

    async def wait_for(self, n: int, timeout: float) -> bool:
        """Wait until at least ``n`` POSTs arrived; False on time-out."""
        deadline = time.monotonic() + timeout
        while len(self) < n:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# ---------------------------------------------------------------------------------------------
# services


@dataclass
class Services:
    """``noetl server`` and ``noetl worker`` subprocesses against the whole cluster."""

    nats_urls: str | list[str]
    ack_wait: float | None = 10.0  # NOETL_ACK_WAIT; None: the services' default (30 s)
    env: dict[str, str] = field(default_factory=dict)
    log_dir: str | None = None
    replicas: int = 3  # NOETL_REPLICAS
    lease_ttl: float | None = 3.0  # NOETL_LEASE_TTL; None: the default users get (6 s)

    def __post_init__(self) -> None:
        self._own_dir = self.log_dir is None
        self.dir = Path(self.log_dir or tempfile.mkdtemp(prefix="noetl-cluster-services-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.kinds: dict[subprocess.Popen[bytes], str] = {}
        self.logs: list[Path] = []

    @property
    def url_list(self) -> str:
        return self.nats_urls if isinstance(self.nats_urls, str) else ",".join(self.nats_urls)

    def base_env(self) -> dict[str, str]:
        dropped = {"NOETL_NATS_URL", "NOETL_LEASE_TTL", "NOETL_ACK_WAIT"}
        env = {k: v for k, v in os.environ.items() if k not in dropped}
        env.update(NOETL_REPLICAS=str(self.replicas), NOETL_LOG_LEVEL="WARNING")
        if self.lease_ttl is not None:
            env["NOETL_LEASE_TTL"] = f"{self.lease_ttl:g}"
        if self.ack_wait is not None:
            env["NOETL_ACK_WAIT"] = f"{self.ack_wait:g}"
        env.update(self.env)
        return env

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = self.dir / f"proc-{len(self.procs)}-{args[0]}.log"
        self.logs.append(log)
        with log.open("wb") as fh:
            p = subprocess.Popen(
                [sys.executable, "-m", "noetl.cli.main", *args, "--nats-url", self.url_list],
                stdout=fh,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=ROOT,
                env={**self.base_env(), **(env or {})},
            )
        self.procs.append(p)
        self.kinds[p] = args[0]
        return p

    def server(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self.spawn("server", "--http-port", "-1", env=env)

    def worker(
        self, concurrency: int = 8, pool: str = "default", env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        return self.spawn("worker", "--pool", pool, "--concurrency", str(concurrency), env=env)

    def alive(self, kind: str | None = None) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None and (kind is None or self.kinds[p] == kind)]

    def kill(self, p: subprocess.Popen[bytes], sig: int = signal.SIGKILL, timeout: float = 30) -> int | None:
        """Send ``sig``; wait for the exit (its code) unless the signal is SIGSTOP/SIGCONT."""
        p.send_signal(sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            return None
        return p.wait(timeout=timeout)

    def terminate(self, p: subprocess.Popen[bytes], timeout: float = 30) -> int:
        """SIGTERM and wait for a graceful exit; SIGKILL after ``timeout`` (exit code -9 then)."""
        p.send_signal(signal.SIGCONT)
        p.terminate()
        try:
            return p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait(timeout=10)

    def rss(self) -> dict[str, int]:
        """Resident memory (KiB) of every running service, as ``<kind>-<pid>``: the soak reports
        it before and after to show what the load left behind."""
        out = {}
        for p in self.alive():
            with contextlib.suppress(OSError, ValueError):
                for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        out[f"{self.kinds[p]}-{p.pid}"] = int(line.split()[1])
        return out

    def output(self, tail: int = 3000) -> str:
        """The tail of every log, for assertion messages."""
        out = []
        for p, log in zip(self.procs, self.logs, strict=False):
            state = "running" if p.poll() is None else f"exit {p.returncode}"
            text = log.read_text(errors="replace")[-tail:] if log.exists() else ""
            out.append(f"== {log.name} (pid {p.pid}, {state})\n{text}")
        return "\n".join(out)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(Exception):
                    p.send_signal(signal.SIGCONT)
                p.kill()
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.wait(timeout=10)
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# client-side helpers


def _url_list(urls: str | Iterable[str]) -> list[str]:
    return [u.strip() for u in urls.split(",") if u.strip()] if isinstance(urls, str) else list(urls)


async def client(
    urls: str | Iterable[str],
    *,
    ensure_replicas: int | None = 3,
    timeout: float = 30.0,
    name: str = "noetl-cluster-test",
) -> Any:
    """A test client of the whole cluster. It pings every second, so a paused node is noticed
    (and left) in seconds. With ``ensure_replicas`` it declares every stream, KV bucket and
    object store with that many replicas, as a service started with NOETL_REPLICAS would, and
    waits until each has a leader (a just-created R3 stream answers nothing for a moment)."""
    from noetl.events.bus import connect

    nc = await connect(_url_list(urls), name=name, ping_interval=1, max_outstanding_pings=2)
    if ensure_replicas:
        from noetl.events.streams import ensure_all

        deadline = time.monotonic() + timeout
        while True:
            try:
                await asyncio.wait_for(ensure_all(nc.jetstream(), replicas=ensure_replicas), 10)
                await wait_all_leaders(nc.jetstream(), timeout=max(1.0, deadline - time.monotonic()))
                break
            except Exception:
                if time.monotonic() > deadline:
                    await close_client(nc)
                    raise
                await asyncio.sleep(0.2)
    return nc


async def wait_all_leaders(js: Any, timeout: float = 20.0) -> dict[str, str]:
    """Wait until every stream (KV buckets and object stores included) has a leader that
    answers; stream name -> leader."""
    deadline = time.monotonic() + timeout
    leaders: dict[str, str] = {}
    missing: list[str] = []
    while True:
        with contextlib.suppress(Exception):
            infos = await asyncio.wait_for(js.streams_info(), 5)
            leaders = {i.config.name: i.cluster.leader for i in infos if i.cluster and i.cluster.leader}
            missing = [i.config.name for i in infos if i.config.name not in leaders]
            if not missing:
                for name in leaders:  # each leader answers its own stream's API
                    await asyncio.wait_for(js.stream_info(name), 2)
                return leaders
        if time.monotonic() > deadline:
            raise TimeoutError(f"streams without a leader after {timeout} s: {missing or '(no answer)'}")
        await asyncio.sleep(0.1)


async def close_client(nc: Any) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(nc.close(), 5)


async def retrying(fn: Callable[[], Awaitable[Any]], timeout: float, *, attempt: float = 5.0) -> Any:
    """``fn()`` again until it succeeds (each try bounded by ``attempt`` s) or ``timeout`` passes;
    for client calls that fail while a stream elects a new leader."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.wait_for(fn(), min(attempt, max(0.1, deadline - time.monotonic())))
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def submit(
    nc: Any,
    playbook: str | None = None,
    *,
    path: str | None = None,
    payload: dict[str, Any] | None = None,
    timeout: float = 30.0,
) -> str:
    """Publish an execution request (the playbook text, or a catalog ``path``); its execution id.
    A publish that fails during a leader election is repeated with the same request id."""
    from noetl.events import subjects as s
    from noetl.events.envelope import dumps
    from noetl.events.ids import execution_id_for

    rid = uuid.uuid4().hex
    body: dict[str, Any] = (
        {"request_id": rid, "path": path} if path else {"request_id": rid, "playbook": playbook}
    )
    if payload is not None:
        body["payload"] = payload
    data = dumps(body)
    js = nc.jetstream()
    await retrying(lambda: js.publish(s.REQUEST_SUBJECT, data, headers={"Nats-Msg-Id": rid}), timeout)
    return execution_id_for(rid)


async def processed_executions(js: Any) -> set[str]:
    """Every execution id with a ``playbook.processed`` event in the log (one read)."""
    from noetl.events import subjects as s
    from noetl.events.bus import read_messages

    msgs = await read_messages(
        NatsBus.of(js), s.EVENTS_STREAM, [s.execution_event_filter("*", "playbook.processed")]
    )
    return {e.get("execution_id") for _, e in msgs}


async def read_events(js: Any, execution_id: str, timeout: float = 20.0) -> list[dict[str, Any]]:
    from noetl.events.bus import read_execution_events

    return await retrying(lambda: read_execution_events(NatsBus.of(js), execution_id), timeout, attempt=10.0)


async def output_of(js: Any, execution_id: str, timeout: float = 20.0) -> dict[str, Any]:
    """The ``--json`` output of an execution, rebuilt from its events (a result stored by
    reference is resolved)."""
    from noetl.client.view import execution_output
    from noetl.events.objects import is_reference, resolve

    out = execution_output(execution_id, await read_events(js, execution_id, timeout))
    if is_reference(out.get("result")):
        out["result"] = await resolve(NatsBus.of(js), out["result"])
    return out


async def finish(nc: Any, execution_id: str, timeout: float = 90.0) -> dict[str, Any]:
    """Wait until the execution is processed; its output. TimeoutError if it is not by then."""
    done, stuck = await finish_all(nc, [execution_id], timeout)
    if stuck:
        raise TimeoutError(f"execution {execution_id} not finished within {timeout} s")
    return done[execution_id]


async def finish_all(
    nc: Any, execution_ids: Iterable[str], timeout: float, poll: float = 0.5
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Wait up to ``timeout`` s for every execution to be processed, by polling the event log (no
    core subscription, which could miss the event while the client reconnects).

    Returns (outputs of the processed executions, ids still unfinished): never raises on a
    stuck run, so a test can report counts."""
    js = nc.jetstream()
    wanted = list(execution_ids)
    done: set[str] = set()
    deadline = time.monotonic() + timeout
    while True:
        try:
            done = await asyncio.wait_for(processed_executions(js), 10) & set(wanted)
        except Exception:
            pass
        if len(done) == len(set(wanted)) or time.monotonic() > deadline:
            break
        await asyncio.sleep(poll)
    outputs: dict[str, dict[str, Any]] = {}
    for eid in wanted:
        if eid in done:
            with contextlib.suppress(Exception):
                outputs[eid] = await output_of(js, eid)
    return outputs, [e for e in wanted if e not in outputs]


async def stream_messages(js: Any, stream: str, timeout: float = 5.0) -> int:
    return int((await asyncio.wait_for(js.stream_info(stream), timeout)).state.messages)


async def commands_left(js: Any, timeout: float = 5.0) -> int:
    """Messages still in NOETL_COMMANDS (a work queue: 0 once every command is acknowledged)."""
    from noetl.events import subjects as s

    return await stream_messages(js, s.COMMANDS_STREAM, timeout)


async def wait_commands_drained(js: Any, timeout: float = 10.0) -> int | None:
    """Poll ``commands_left`` until it is 0 or ``timeout`` passes; the last count seen (None if
    the stream never answered)."""
    deadline = time.monotonic() + timeout
    left: int | None = None
    while True:
        with contextlib.suppress(Exception):
            left = await commands_left(js, timeout=2.0)
        if left == 0 or time.monotonic() > deadline:
            return left
        await asyncio.sleep(0.25)


def terminal_events_per_run(events: Iterable[dict[str, Any]]) -> Counter[tuple[str | None, int | None]]:
    """How many terminal events (step.done/failed, loop.iteration.done/failed) each run has,
    keyed by (step_run_id, loop index or None). Exactly-once means every value is 1."""
    return Counter(
        (e.get("step_run_id"), (e.get("payload") or {}).get("index"))
        for e in events
        if e.get("name") in TERMINAL_EVENTS
    )


# ---------------------------------------------------------------------------------------------
# the workload of the guarantee tests


def recorder_loop_playbook(iterations: int = 30, max_in_flight: int = 10, read_timeout: float = 30) -> str:
    """A parallel loop whose every iteration POSTs ``{execution, i}`` to ``workload.recorder``
    (an external side effect) and then yields ``i``; a last step totals the iterations.
    Result: ``{"n": iterations, "s": sum(range(iterations))}``. ``read_timeout`` is the POST's
    own time-out, counted on the worker's clock (a worker paused longer fails the task)."""
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: cluster_loop, path: cluster/loop}}
workload: {{recorder: "http://127.0.0.1:9"}}
workflow:
  - step: start
    loop:
      in: "{{{{ range({iterations}) | list }}}}"
      iterator: i
      spec: {{mode: parallel, max_in_flight: {max_in_flight}}}
    tool:
      - name: post
        kind: http
        method: POST
        url: "{{{{ workload.recorder }}}}"
        json: {{execution: "{{{{ execution_id }}}}", i: "{{{{ iter.i }}}}"}}
        spec:
          timeout: {{connect: 5, read: {read_timeout:g}}}
      - name: value
        kind: noop
        result: "{{{{ iter.i }}}}"
    next:
      arcs:
        - step: total
          when: "{{{{ event.name == 'loop.done' }}}}"
          args: {{n: "{{{{ event.result | length }}}}", s: "{{{{ event.result | sum }}}}"}}
  - step: total
    tool: {{kind: noop, result: "{{{{ args }}}}"}}
"""


# ---------------------------------------------------------------------------------------------
# the fault matrix (issue 25): one function runs any fault against a load and counts the outcome


@dataclass(frozen=True)
class Load:
    """``executions`` runs of ``recorder_loop_playbook(iterations, max_in_flight)``: every
    iteration POSTs one record, so a lost or repeated tool run shows in the recorder."""

    executions: int = 50
    iterations: int = 100
    max_in_flight: int = 20
    delay: float = 0.0  # s the recorder takes to answer each POST
    read_timeout: float = 30.0  # s the POST waits for its answer, on the worker's clock

    @property
    def posts(self) -> int:
        return self.executions * self.iterations

    @property
    def expected(self) -> dict[str, int]:
        return {"n": self.iterations, "s": sum(range(self.iterations))}

    def __str__(self) -> str:
        return f"{self.executions}x{self.iterations} (max_in_flight {self.max_in_flight})"


@dataclass
class Case:
    """What a fault gets: the processes it may pause, kill or cut, a client, and a notebook."""

    name: str
    nats: Any  # a NatsCluster, or tests.faults.harness.Cluster (one nats-server)
    services: Services
    recorder: Recorder
    nc: Any
    load: Load
    t0: float = field(default_factory=time.monotonic)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    fault_end: float | None = None  # set by the fault when its effect ends, else when it returns

    @property
    def js(self) -> Any:
        return self.nc.jetstream()

    def note(self, text: str) -> None:
        self.notes.append(f"t+{time.monotonic() - self.t0:.1f}s [{len(self.recorder)} POSTs] {text}")

    def ended(self) -> None:
        """The fault's effect is over (SIGCONT sent, node back): recovery is measured from here."""
        self.fault_end = time.monotonic()


Fault = Callable[[Case], Awaitable[None]]


@dataclass
class CaseResult:
    name: str
    load: Load
    finished: int = 0
    stuck: int = 0
    failed: int = 0
    wrong: int = 0
    missing: int = 0
    duplicate_records: int = 0
    duplicate_terminal: int = 0
    commands_left: int | None = None
    recovery: float | None = None  # s from the fault's end to the last execution finished
    elapsed: float = 0.0
    details: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.finished == self.load.executions
            and not (self.stuck or self.failed or self.wrong or self.missing)
            and not (self.duplicate_records or self.duplicate_terminal)
            and self.commands_left == 0
            and not any(d.startswith("problem:") for d in self.details)
        )

    def counts(self) -> str:
        return (
            f"finished {self.finished}/{self.load.executions}, stuck {self.stuck}, failed {self.failed}, "
            f"wrong results {self.wrong}, effects missing {self.missing}, duplicate effects "
            f"{self.duplicate_records}, duplicate terminal events {self.duplicate_terminal}, "
            f"commands left {self.commands_left}"
        )

    def summary(self) -> str:
        """The one line per case that the matrix prints (and appends to $NOETL_FAULT_MATRIX_LOG)."""
        recovery = "n/a" if self.recovery is None else f"{self.recovery:.1f}s"
        verdict = "PASS" if self.ok else "FAIL"
        return (
            f"FAULT-MATRIX {verdict} {self.name} | load {self.load} | recovery {recovery} | "
            f"{self.counts()} | wall {self.elapsed:.0f}s"
        )

    def message(self) -> str:
        return "\n".join([self.summary(), *self.details])


async def _finish_times(js: Any, eids: set[str], finished: dict[str, float], stop: asyncio.Event) -> None:
    """Note when each execution is first seen processed (polling the log every 0.5 s)."""
    while not stop.is_set():
        with contextlib.suppress(Exception):
            now = time.monotonic()
            for e in (await asyncio.wait_for(processed_executions(js), 10)) & eids:
                finished.setdefault(e, now)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)


async def run_case(
    name: str,
    nats: Any,
    services: Services,
    recorder: Recorder,
    fault: Fault,
    *,
    load: Load = Load(),
    servers: int = 2,
    workers: int = 2,
    concurrency: int = 16,
    trigger: float | None = 0.2,
    stall: float = 45.0,
    give_up: float = 420.0,
    fault_timeout: float = 120.0,
    before: Callable[[Case], Awaitable[None]] | None = None,
    after: Callable[[Case], Awaitable[None]] | None = None,
) -> CaseResult:
    """Run one case of the fault matrix and count its outcome (never raises on a stuck run).

    Starts ``servers`` and ``workers`` (at the services' settings: the matrix leaves the lease
    TTL and the ack wait at their defaults), proves the system decides with one warm-up
    execution, then either applies ``fault`` once ``trigger`` of the load's POSTs arrived, or
    (``trigger=None``) applies it to the idle system and submits the load after it. It waits
    until every execution is processed, or nothing moved (no execution finished, no POST) for
    ``stall`` seconds after the fault, or ``give_up`` seconds passed: generous limits to give up,
    never a timed assertion. ``nats`` is what the fault acts on: a ``NatsCluster`` (``urls``) or
    the one nats-server of tests/faults (``url``)."""
    urls = getattr(nats, "urls", None) or [nats.url]
    single = services.replicas == 1
    nc = await client(urls, ensure_replicas=None if single else services.replicas)
    case = Case(name, nats, services, recorder, nc, load)
    result = CaseResult(name, load)
    finished: dict[str, float] = {}
    stop = asyncio.Event()
    tracker: asyncio.Task[None] | None = None
    try:
        if single:
            from noetl.events.streams import ensure_all

            await ensure_all(nc.jetstream())
        recorder.delay = load.delay
        for _ in range(servers):
            services.server()
        for _ in range(workers):
            services.worker(concurrency=concurrency)
        playbook = recorder_loop_playbook(load.iterations, load.max_in_flight, load.read_timeout)
        warm = await submit(nc, recorder_loop_playbook(1, 1), payload={"recorder": recorder.url})
        _, unfinished = await finish_all(nc, [warm], 60)
        if unfinished:
            case.problems.append("the warm-up execution did not finish within 60 s (before any fault)")
        case.note("warm-up execution finished" if not unfinished else "warm-up execution stuck")
        if before is not None:
            await before(case)
        eids: list[str] = []

        async def submit_load() -> None:
            for _ in range(load.executions):
                eids.append(await submit(nc, playbook, payload={"recorder": recorder.url}))
            case.note(f"submitted {len(eids)} executions")

        async def apply() -> None:
            case.note("fault starts")
            try:
                await asyncio.wait_for(fault(case), fault_timeout)
            except Exception as e:
                case.problems.append(f"applying the fault failed: {e!r}")
            if case.fault_end is None:
                case.ended()
            case.note("fault ends")

        if trigger is None:
            await apply()
            await submit_load()
        else:
            await submit_load()
            want = int(trigger * load.posts)
            if not await recorder.wait_for(want, 120):
                case.problems.append(f"only {len(recorder)} POSTs within 120 s (fault at {want})")
            await apply()
        tracker = asyncio.create_task(_finish_times(nc.jetstream(), set(eids), finished, stop))
        deadline = case.t0 + give_up
        seen, moved = (-1, -1), time.monotonic()
        while len(finished) < len(eids) and time.monotonic() < deadline:
            now = (len(finished), len(recorder))
            if now != seen:
                seen, moved = now, time.monotonic()
            elif time.monotonic() - moved > stall:
                case.note(f"nothing moved for {stall:g} s: giving up")
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(0.6)  # one more poll of the tracker
        stop.set()
        await tracker
        case.note(f"{len(finished)} finished, {len(eids) - len(finished)} unfinished")
        if after is not None:
            await after(case)
        await _count(case, result, eids, finished)
    finally:
        stop.set()
        if tracker is not None and not tracker.done():
            tracker.cancel()
        await close_client(nc)
    result.elapsed = time.monotonic() - case.t0
    print(result.message())  # pytest -rP or -s shows it for a passing case too
    if log := os.environ.get("NOETL_FAULT_MATRIX_LOG"):
        with open(log, "a") as fh:
            fh.write(result.summary() + "\n")
    return result


async def _count(case: Case, result: CaseResult, eids: list[str], finished: dict[str, float]) -> None:
    js = case.js
    load = case.load
    failed: dict[str, Any] = {}
    wrong: dict[str, Any] = {}
    dup_terminal: dict[str, int] = {}
    progress: dict[str, int] = {}
    for e in eids:
        events: list[dict[str, Any]] | None = None
        if e in finished:
            try:
                out = await output_of(js, e, timeout=30)
                events = out["events"]
                if out["status"] != "success":
                    failed[e[:8]] = (out["status"], str(out.get("error"))[:300])
                elif out["result"] != load.expected:
                    wrong[e[:8]] = out["result"]
            except Exception as ex:
                failed[e[:8]] = ("unreadable", repr(ex)[:200])
        else:
            with contextlib.suppress(Exception):
                events = await read_events(js, e, timeout=15)
            if events is not None:
                progress[e[:8]] = sum(1 for ev in events if ev.get("name") == "loop.iteration.done")
                _keep_events(case, e, events)
        if events is not None:
            extra = sum(n - 1 for n in terminal_events_per_run(events).values() if n > 1)
            if extra:
                dup_terminal[e[:8]] = extra
    records = case.recorder.count_by_keys("execution", "i")
    missing = [(e, i) for e in eids for i in range(load.iterations) if (e, i) not in records]
    dups = {k: n - 1 for k, n in records.items() if n > 1 and k[0] in set(eids)}
    result.finished = len(finished)
    result.stuck = len(eids) - len(finished)
    result.failed, result.wrong, result.missing = len(failed), len(wrong), len(missing)
    result.duplicate_records = sum(dups.values())
    result.duplicate_terminal = sum(dup_terminal.values())
    result.commands_left = await wait_commands_drained(js, 3 if result.stuck else 15)
    if finished and case.fault_end is not None and not result.stuck:  # none: it never recovered
        result.recovery = max(0.0, max(finished.values()) - case.fault_end)
    d = result.details
    if failed:
        d.append(f"failed: {dict(list(failed.items())[:5])}")
    if wrong:
        d.append(f"wrong results (want {load.expected}): {dict(list(wrong.items())[:5])}")
    if missing:
        d.append(f"missing records (first 10): {[(e[:8], i) for e, i in missing[:10]]}")
    if dups:
        d.append(f"duplicate records (first 10): {[(e[:8], i, n) for (e, i), n in list(dups.items())[:10]]}")
    if dup_terminal:
        d.append(f"duplicate terminal events per execution: {dup_terminal}")
    if progress:
        d.append(f"unfinished executions' loop.iteration.done counts (of {load.iterations}): {progress}")
    d += [f"problem: {p}" for p in case.problems]
    d += [f"  {n}" for n in case.notes]


def _keep_events(case: Case, execution_id: str, events: list[dict[str, Any]]) -> None:
    """With NOETL_FAULT_MATRIX_KEEP=dir, an unfinished execution's whole log goes to a file there
    (the cluster and its streams are gone once the case ends)."""
    keep = os.environ.get("NOETL_FAULT_MATRIX_KEEP")
    if not keep:
        return
    path = Path(keep) / f"{case.name}-{execution_id}.jsonl"
    with path.open("w") as fh:
        for ev in events:
            fh.write(json.dumps(ev, default=str) + "\n")
    case.note(f"events of unfinished {execution_id[:8]} kept in {path}")


async def stream_sizes(js: Any) -> dict[str, tuple[int, int]]:
    """Stream name -> (messages, bytes), for the soak's before/after line."""
    infos = await asyncio.wait_for(js.streams_info(), 10)
    return {i.config.name: (int(i.state.messages), int(i.state.bytes)) for i in infos}
