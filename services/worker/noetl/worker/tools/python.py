"""``python``: run a snippet of Python written in the playbook.

**Trusted code only.** A python task runs in the worker process with the worker's own
permissions: there is no sandbox, so it can read the worker's files, environment and memory,
and a playbook author who can write a python task can do anything the worker can. Run workers
that execute untrusted playbooks in their own container or account. (Templates are sandboxed;
python tasks are not, by design: they exist for code.)

Two forms, as in upstream NoETL playbooks:

- the code defines ``main``: it is called as ``main(**args)`` and its return value is the result;
- otherwise the code runs as a script with ``args`` as its globals, and its variable ``result``
  is the result.

The code runs in a thread of its own so the worker's event loop keeps serving other commands,
and is compiled once per distinct source. ``spec.timeout`` (a number or ``{read: n}``) bounds
it: on a time-out the outcome is ``timeout`` at once, and the thread is asked to stop by an
exception raised inside it — pure-Python loops stop at their next bytecode, a blocking C call
(``time.sleep``, a socket read) only when it returns. ``print`` writes to stderr, so a task's
output joins the logs and never corrupts ``noetl run --json`` on stdout.
"""

from __future__ import annotations

import asyncio
import builtins
import copy
import ctypes
import functools
import sys
import threading
from collections.abc import Callable, Mapping
from types import CodeType, TracebackType
from typing import Any

from noetl.dsl.errors import PythonError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds
from noetl.worker.tools.values import NotJsonError, strict_json

FILENAME = "<python task>"


class TaskTimedOut(BaseException):
    """Raised inside a task's thread when its time-out has passed (not an ``Exception``, so a
    bare ``except Exception`` in the task does not swallow it)."""


@functools.lru_cache(maxsize=512)
def _compile(source: str) -> CodeType:
    return compile(source, FILENAME, "exec")


def _print_to_stderr(*values: Any, **kwargs: Any) -> None:
    if kwargs.get("file") is None:
        kwargs["file"] = sys.stderr
    builtins.print(*values, **kwargs)


def _execute(code: CodeType, args: dict[str, Any]) -> Any:
    # args are globals in both forms: a script reads them, and a `main` can too (its own
    # parameters shadow them); rendered args are JSON values, so a callable `main` is the code's
    namespace: dict[str, Any] = {"__name__": "__noetl_task__", "__builtins__": builtins,
                                 "print": _print_to_stderr, **args}
    exec(code, namespace)
    main = namespace.get("main")
    if callable(main):
        return main(**args)
    return namespace.get("result")


def _error_line(tb: TracebackType | None) -> int | None:
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == FILENAME:
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


async def _run_in_thread(fn: Callable[[], Any], timeout: float | None, name: str) -> Any:
    """Run ``fn`` in a fresh daemon thread; on time-out or cancellation interrupt it.

    A thread per run (not the loop's shared executor) so a runaway task cannot starve the pool
    other kinds rely on.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[tuple[bool, Any]] = loop.create_future()
    lock = threading.Lock()
    finished = False

    def resolve(outcome: tuple[bool, Any]) -> None:
        if not future.done():
            future.set_result(outcome)

    def target() -> None:
        nonlocal finished
        outcome: tuple[bool, Any]
        try:
            try:
                outcome = (True, fn())
            except BaseException as exc:
                outcome = (False, exc)
            with lock:
                finished = True
        except BaseException as exc:  # the interrupt landed between fn's end and the flag
            outcome, finished = (False, exc), True
        try:
            loop.call_soon_threadsafe(resolve, outcome)
        except RuntimeError:  # the loop has closed meanwhile; nobody waits for this result
            pass

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    try:
        async with asyncio.timeout(timeout):
            succeeded, value = await future
    except (TimeoutError, asyncio.CancelledError):
        with lock:
            if not finished and thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                           ctypes.py_object(TaskTimedOut))
        raise
    if succeeded:
        return value
    raise value


def _python_error(exc: BaseException) -> dict[str, Any]:
    name = type(exc).__name__
    text = str(exc)
    py: dict[str, Any] = {"exception_type": name}
    line = exc.lineno if isinstance(exc, SyntaxError) else _error_line(exc.__traceback__)
    if line is not None:
        py["line"] = line
    return error(PythonError(f"{name}: {text}" if text else name, retryable=False), py=py)


class PythonTool:
    kind = "python"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        source = config.get("code")
        if not isinstance(source, str) or not source.strip():
            return error(ToolError("python task needs `code`: a string of Python source"))
        args = config.get("args") or {}
        if not isinstance(args, Mapping):
            return error(ToolError(f"python task `args` must be a mapping, got {type(args).__name__}"))
        try:
            code = _compile(source)
        except SyntaxError as exc:
            return _python_error(exc)
        _, read = timeout_seconds(ctx.spec)
        # a copy: the task may mutate its arguments, which can be the pipeline's own ctx values
        call_args = copy.deepcopy(dict(args))
        try:
            value = await _run_in_thread(lambda: _execute(code, call_args), read,
                                         f"noetl-python-{ctx.task}")
        except TimeoutError:
            return error(TimeoutError_(f"python task '{ctx.task}' did not finish within {read:g} s"),
                         py={"exception_type": "TimeoutError"})
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            return _python_error(exc)
        try:
            return ok(strict_json(value))
        except NotJsonError as exc:
            return error(PythonError(
                f"python task result is not JSON-serializable: {exc}; return None, bool, int, float, "
                "str, lists and dicts with string keys (convert dates with .isoformat())",
                retryable=False), py={"exception_type": "TypeError"})


register(PythonTool())
