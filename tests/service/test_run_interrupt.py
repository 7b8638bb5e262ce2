"""`noetl run` of an approval (issue 31): it says what the execution waits for and how to signal
it, and Ctrl-C ends it with one line, not a warning per consumer of an embedded NATS server that
the same Ctrl-C had already shut down."""

from __future__ import annotations

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
