"""`kind: script` (SEMANTICS §22): argv or shell commands, script text, args on stdin and in
NOETL_ARGS, a minimal environment, exit codes, capped output, timeout and cancellation that stop
the whole process group."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import pytest

from noetl.worker.tools import get_tool
from noetl.worker.tools import script as script_mod
from tests.unit.tools.helpers import make_ctx


async def run(config: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return await get_tool("script").run(config, make_ctx(spec=spec))


async def test_an_argv_command_runs_without_a_shell() -> None:
    out = await run({"command": ["echo", "a b", "$HOME"]})
    assert out["status"] == "ok"
    assert out["result"] == {"exit_code": 0, "stdout": "a b $HOME\n", "stderr": ""}


async def test_a_string_command_runs_in_the_shell_and_json_stdout_is_parsed() -> None:
    out = await run({"command": "printf '{\"n\": %s}' $((20 + 1))"})
    assert out["status"] == "ok" and out["result"]["json"] == {"n": 21}


async def test_a_script_reads_its_args_as_json_on_stdin_and_in_noetl_args() -> None:
    text = 'read line; echo "stdin=$line"; echo "env=$NOETL_ARGS"; echo "x=$X"'
    out = await run({"script": text, "args": {"a": 1}, "env": {"X": "y"}})
    assert out["status"] == "ok", out
    assert out["result"]["stdout"] == 'stdin={"a": 1}\nenv={"a": 1}\nx=y\n'


async def test_a_script_with_its_own_interpreter() -> None:
    out = await run({"script": "import sys, json\nprint(json.load(sys.stdin)['a'] * 2)",
                     "interpreter": ["python3"], "args": {"a": 21}})
    assert out["status"] == "ok" and out["result"]["json"] == 42


async def test_the_worker_environment_is_not_handed_to_the_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_CREDENTIALS_KEY", "not-for-scripts")
    out = await run({"command": ["env"]})
    assert "not-for-scripts" not in out["result"]["stdout"]
    assert "PATH=" in out["result"]["stdout"]


async def test_a_non_zero_exit_is_script_error_with_the_code_and_the_stderr_tail() -> None:
    out = await run({"command": "echo partial; echo 'no such table' >&2; exit 3"})
    assert out["status"] == "error" and out["error"]["kind"] == "script_error"
    assert out["error"]["exit_code"] == 3
    assert "exit code 3" in out["error"]["message"] and "no such table" in out["error"]["message"]
    assert "task 't' of step 'start'" in out["error"]["message"]
    assert out["result"]["stdout"] == "partial\n"


async def test_output_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(script_mod, "MAX_STREAM_BYTES", 100)
    out = await run({"command": "head -c 1000 /dev/zero | tr '\\0' x"})
    stdout = out["result"]["stdout"]
    assert stdout.startswith("x" * 100) and "900 more bytes dropped" in stdout


async def _gone(pid_file: Path) -> bool:
    pid = int(pid_file.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_timeout_stops_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    t0 = time.monotonic()
    # the child of the shell must die too: it is in the script's process group
    out = await run({"command": f"sleep 30 & echo $! > {pid_file}; wait"}, spec={"timeout": 0.5})
    assert time.monotonic() - t0 < 5
    assert out["status"] == "error" and out["error"]["kind"] == "timeout"
    assert await _gone(pid_file)


async def test_a_cancellation_stops_the_process_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    task = asyncio.create_task(run({"command": f"sleep 30 & echo $! > {pid_file}; wait"}))
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await _gone(pid_file)


async def test_a_worker_that_does_not_run_scripts_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_ALLOW_SCRIPT", "false")
    out = await run({"command": ["true"]})
    assert out["error"]["kind"] == "script_not_allowed" and "spec.pool" in out["error"]["message"]


async def test_a_command_that_does_not_exist_is_a_tool_error() -> None:
    out = await run({"command": ["/no/such/binary"]})
    assert out["status"] == "error" and out["error"]["kind"] == "tool_error"
    assert "/no/such/binary" in out["error"]["message"]
