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
output never corrupts ``noetl run --json`` on stdout; inside a pipeline the worker captures it,
with what the code logs, as the task run's ``output`` (``noetl.worker.output``): the thread runs in
a copy of the caller's context, which is where the capture is keyed.
"""

from __future__ import annotations

import asyncio
import builtins
import contextvars
import copy
import ctypes
import functools
import re
import sys
import threading
from collections.abc import Callable, Mapping
from types import CodeType, TracebackType
from typing import Any

from noetl.dsl.errors import PythonError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds
from noetl.worker.tools.values import ResultNotJsonError, strict_json

FILENAME = "<python task>"


class TaskTimedOutError(BaseException):
    """Raised inside a task's thread when its time-out has passed. Outside the error tree on
    purpose (``BaseException``, like ``asyncio.CancelledError``): a bare ``except Exception`` in
    the task must not swallow it; the tool reports it as ``timeout``."""


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

    # the caller's context: the task run's output capture and its log bindings follow the code
    context = contextvars.copy_context()
    thread = threading.Thread(target=context.run, args=(target,), name=name, daemon=True)
    thread.start()
    try:
        async with asyncio.timeout(timeout):
            succeeded, value = await future
    except (TimeoutError, asyncio.CancelledError):
        with lock:
            if not finished and thread.ident is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident),
                                                           ctypes.py_object(TaskTimedOutError))
        raise
    if succeeded:
        return value
    raise value


_SHOWN_CODE_CHARS = 160   # a code line longer than this is cut in the message
_CODE_KEY = re.compile(r"^\s*(?:-\s+)?code\s*:\s*(.*?)\s*$")


def playbook_line(playbook_text: str, task_line: int, code: str, line: int) -> int | None:
    """The line of the playbook file that holds line ``line`` of a task's ``code``, or None.

    Why: the user edits the playbook, not the code string, so ``file:line`` is what lets an
    editor jump to the failing statement. The worker keeps no line map, so the task's ``code:``
    key is looked up from the task's own line, and the answer is given only when the text there
    is the code's own text (a ``|`` block or a one-line value); folded or escaped strings, whose
    lines do not map one to one, give None rather than a wrong line.
    """
    lines = playbook_text.splitlines()
    code_lines = code.splitlines()
    if not 1 <= line <= len(code_lines) or task_line < 1:
        return None
    for i in range(task_line - 1, len(lines)):
        match = _CODE_KEY.match(lines[i])
        if match is None:
            continue
        value = match.group(1)
        if value.startswith("|"):
            at = i + line           # 0-based index of the failing line: the block starts below the key
            if at < len(lines) and lines[at].strip() == code_lines[line - 1].strip():
                return at + 1
        elif len(code_lines) == 1 and code_lines[0].strip() and code_lines[0].strip() in value:
            return i + 1            # `code: "..."` on the key's own line
        return None
    return None


def _code_text(source: str, line: int | None) -> str | None:
    lines = source.splitlines()
    if line is None or not 1 <= line <= len(lines):
        return None
    text = lines[line - 1].strip()
    return text if len(text) <= _SHOWN_CODE_CHARS else text[:_SHOWN_CODE_CHARS] + "..."


def _python_error(exc: BaseException, source: str, ctx: ToolContext) -> dict[str, Any]:
    """The outcome of a task whose code raised or did not compile.

    The message says where, because the exception's own text rarely does: ``KeyError: 'amount'``
    names neither the task nor the statement. Only the playbook's own code is quoted, never the
    values the code was working on (they may be credentials).
    """
    name = type(exc).__name__
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    py: dict[str, Any] = {"exception_type": name}
    line = exc.lineno if isinstance(exc, SyntaxError) else _error_line(exc.__traceback__)
    details: dict[str, Any] = {}
    where = f"task '{ctx.task}' of step '{ctx.step}'"
    if line is not None:
        py["line"] = details["line"] = line
        code = _code_text(source, line)
        where += f", line {line} of the task's code" + (f": {code}" if code else "")
        origin = ctx.extra.get("code_origin")
        if origin is not None:
            at = playbook_line(origin[0], origin[1], source, line)
            if at is not None:
                details["playbook_line"] = at
    head = f"{name}: {text}" if text else name
    return error(PythonError(f"{head} ({where})", retryable=False, **details), py=py)


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
            return _python_error(exc, source, ctx)
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
            return _python_error(exc, source, ctx)
        try:
            return ok(strict_json(value))
        except ResultNotJsonError as exc:
            return error(PythonError(
                f"python task '{ctx.task}' of step '{ctx.step}': its result is not JSON-serializable: "
                f"{exc}; return None, bool, int, float, str, lists and dicts with string keys (convert "
                "dates with .isoformat())",
                retryable=False), py={"exception_type": "TypeError"})


register(PythonTool())
