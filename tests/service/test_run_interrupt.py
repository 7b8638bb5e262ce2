"""`noetl run` of an approval (issue 31): it says what the execution waits for and how to signal
it, and Ctrl-C ends it with one line, not a warning per consumer of an embedded NATS server that
the same Ctrl-C had already shut down."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.playbooks import approval


def test_ctrl_c_during_a_wait_is_one_line(tmp_path: Path) -> None:
    book = tmp_path / "approval.yaml"
    book.write_text(approval("tests/run_interrupt/approval"))
    proc = subprocess.Popen(
        [sys.executable, "-m", "noetl.cli.main", "run", str(book)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its own group, as a terminal gives it: Ctrl-C goes to the group
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        seen = ""
        assert proc.stderr is not None
        while "waits for signal approval" not in seen:
            assert time.monotonic() < deadline, seen
            line = proc.stderr.readline()
            assert line or proc.poll() is None, seen
            seen += line
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
        _, rest = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "noetl signal" in seen and "--nats-url nats://127.0.0.1:" in seen
    assert proc.returncode == 130
    assert "409" not in rest and "Server Shutdown" not in rest, rest
    assert rest.strip().splitlines() == ["noetl: interrupted (SIGINT)"], rest


SLOW_VALIDATION = """
import sys, time
import noetl.dsl.validate as v
checked = v.validate_text
def slow(*a, **k):
    print("validating", file=sys.stderr, flush=True)
    time.sleep(30)
    return checked(*a, **k)
v.validate_text = slow
from noetl.cli.main import main
sys.exit(main(["run", sys.argv[1]]))
"""


def test_sigterm_while_validating_leaves_no_nats_server(tmp_path: Path) -> None:
    """The nats-server is launched before the playbook is validated (it boots meanwhile), in a
    session of its own: a SIGTERM then must stop it, and still end the process by the signal."""
    book = tmp_path / "approval.yaml"
    book.write_text(approval("tests/run_interrupt/early"))
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_VALIDATION, str(book)], stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        assert "validating" in proc.stderr.readline()
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        servers = [int(pid) for pid in children.stdout.split()]
        assert servers  # the early nats-server
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == -signal.SIGTERM
        for pid in servers:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
            cmdline = Path(f"/proc/{pid}/cmdline")
            assert not cmdline.exists() or "nats" not in cmdline.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
