"""``script``: a command or a script run in a subprocess on the worker (SEMANTICS §22).

``command`` is a list of argv (run as is, no shell) or a string (run by ``shell``, default
``["/bin/sh", "-c"]``); ``script`` is text run by ``interpreter`` (argv, default
``["/bin/sh", "-e"]``): standard input carries ``args``, so the text is written to a file in the
run's working directory and given to the interpreter as its last argument. ``script`` is never
rendered (it is code, like a python task's ``code``); data reaches it through ``args`` and ``env``.
``args`` reach the process as JSON on standard input and in ``NOETL_ARGS``; ``env`` adds to a
minimal environment (``PATH``, ``HOME``, ``LANG``, ``LC_ALL``, ``TZ`` of the worker): the
worker's own variables (its credentials key, its NATS credentials) are never handed to a script.
``cwd`` defaults to a fresh temporary directory, removed afterwards.

The process runs in its own process group (``start_new_session``), so a timeout (``spec.timeout``,
the read part), a step time limit or a cancellation stops the whole group: TERM, then KILL after
:data:`KILL_AFTER_S`. The result is ``{exit_code, stdout, stderr}`` (and ``json`` when stdout
parses as JSON); each stream keeps at most :data:`MAX_STREAM_BYTES`, like a task's captured
output, and says how much it dropped. The worker masks the result and the error like every
other value and sends a large one by reference. A non-zero exit is ``script_error`` with the exit
code and the tail of stderr in the message; ``NOETL_ALLOW_SCRIPT=false`` on a worker refuses the
kind (``script_not_allowed``), so a deployment chooses the pools that run scripts.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import tempfile
from collections.abc import Mapping
from typing import Any

from noetl.dsl.errors import ScriptError, ScriptNotAllowedError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds

ALLOW_ENV = "NOETL_ALLOW_SCRIPT"
KILL_AFTER_S = 5.0
MAX_STREAM_BYTES = 64 * 1024  # per stream, as a task run's captured output
STDERR_TAIL_CHARS = 400
DEFAULT_SHELL = ("/bin/sh", "-c")
DEFAULT_INTERPRETER = ("/bin/sh", "-e")
_INHERITED = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")


def allowed() -> bool:
    """Whether this worker runs scripts: anything but an explicit no (``false``, ``0``, ``no``)."""
    from noetl.events.settings import setting

    return bool(setting("allow_script"))


class _Capped:
    """One stream of the process: the first ``cap`` bytes kept, the rest counted."""

    def __init__(self, cap: int) -> None:
        self.cap, self.kept, self.dropped = cap, bytearray(), 0

    async def drain(self, stream: asyncio.StreamReader | None) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65_536):
            room = self.cap - len(self.kept)
            self.kept += chunk[: max(room, 0)]
            self.dropped += max(len(chunk) - max(room, 0), 0)

    def text(self) -> str:
        out = self.kept.decode("utf-8", "replace")
        return out + (f"\n[... {self.dropped} more bytes dropped]" if self.dropped else "")


def _argv(value: Any, what: str) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    if value is None:
        return None
    raise ToolError(f"script task `{what}` is a list of strings (argv), got {type(value).__name__}")


def _environment(env: Any, args_json: str) -> dict[str, str]:
    out = {k: os.environ[k] for k in _INHERITED if k in os.environ}
    if env is not None:
        if not isinstance(env, Mapping):
            raise ToolError(f"script task `env` must be a mapping, got {type(env).__name__}")
        for key, value in env.items():
            out[str(key)] = value if isinstance(value, str) else json.dumps(value)
    out["NOETL_ARGS"] = args_json
    return out


async def _stop(proc: asyncio.subprocess.Process) -> None:
    """TERM the process group, KILL it after ``KILL_AFTER_S``: the script's children too."""
    if proc.returncode is not None:
        return
    for sig, wait in ((signal.SIGTERM, KILL_AFTER_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            await asyncio.wait_for(proc.wait(), wait)
            return
        except TimeoutError:
            continue


class ScriptTool:
    kind = "script"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        if not allowed():
            return error(
                ScriptNotAllowedError(
                    f"script task '{ctx.task}' of step '{ctx.step}': this worker does not run scripts "
                    f"({ALLOW_ENV}=false): send the step to a pool whose workers do (`spec.pool`)"
                )
            )
        args = config.get("args") or {}
        if not isinstance(args, Mapping):
            return error(ToolError(f"script task `args` must be a mapping, got {type(args).__name__}"))
        args_json = json.dumps(args)
        workdir = None
        try:
            env = _environment(config.get("env"), args_json)
            command, script = config.get("command"), config.get("script")
            if (command is None) == (script is None):
                raise ToolError("a script task needs exactly one of `command` (argv or a string) or `script`")
            cwd = config.get("cwd")
            if cwd is not None and not isinstance(cwd, str):
                raise ToolError(f"script task `cwd` is a directory path, got {type(cwd).__name__}")
            if cwd is None:
                cwd = workdir = tempfile.mkdtemp(prefix="noetl-script-")
            if isinstance(command, str):
                argv = [*(_argv(config.get("shell"), "shell") or DEFAULT_SHELL), command]
            elif command is not None:
                argv = _argv(command, "command") or []
            else:
                if not isinstance(script, str):
                    raise ToolError(f"script task `script` is text, got {type(script).__name__}")
                path = os.path.join(workdir or tempfile.mkdtemp(prefix="noetl-script-"), ".noetl-script")
                if workdir is None:
                    workdir = os.path.dirname(path)
                with open(path, "w") as f:
                    f.write(script)
                argv = [*(_argv(config.get("interpreter"), "interpreter") or DEFAULT_INTERPRETER), path]
            return await self._run(argv, env, cwd, args_json, ctx)
        except ToolError as e:
            return error(e)
        finally:
            if workdir is not None:
                shutil.rmtree(workdir, ignore_errors=True)

    async def _run(
        self, argv: list[str], env: dict[str, str], cwd: str, args_json: str, ctx: ToolContext
    ) -> dict[str, Any]:
        where = f"script task '{ctx.task}' of step '{ctx.step}'"
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,  # its own process group: a stop reaches its children
            )
        except OSError as e:
            raise ToolError(f"{where}: cannot start {argv[0]!r}: {e.strerror or e}") from None
        out, err = _Capped(MAX_STREAM_BYTES), _Capped(MAX_STREAM_BYTES)
        _, read = timeout_seconds(ctx.spec)

        async def talk() -> int:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(args_json.encode() + b"\n")  # one line: `read` in a shell gets it
                await proc.stdin.drain()
            proc.stdin.close()
            await asyncio.gather(out.drain(proc.stdout), err.drain(proc.stderr))
            return await proc.wait()

        try:
            async with asyncio.timeout(read):
                code = await talk()
        except TimeoutError:
            await _stop(proc)
            stopped = {"exit_code": proc.returncode, "stdout": out.text(), "stderr": err.text()}
            return error(TimeoutError_(f"{where} did not finish within {read:g} s: stopped"), result=stopped)
        except BaseException:  # a cancellation or a step time limit: the process must not outlive it
            await asyncio.shield(_stop(proc))
            raise
        result: dict[str, Any] = {"exit_code": code, "stdout": out.text(), "stderr": err.text()}
        if out.kept.strip() and not out.dropped:
            with contextlib.suppress(ValueError):
                result["json"] = json.loads(out.kept)
        if code != 0:
            tail = err.text()[-STDERR_TAIL_CHARS:].strip()
            said = f"exit code {code}" if code > 0 else f"killed by signal {-code}"
            return error(
                ScriptError(
                    f"{where}: {said}" + (f"; stderr ends: {tail}" if tail else " (nothing on stderr)"),
                    exit_code=code,
                ),
                result=result,
            )
        return ok(result)


register(ScriptTool())
