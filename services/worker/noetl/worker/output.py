"""What a task run prints or logs, captured per task run (issue 19).

Many task runs share one worker process: concurrent commands are asyncio tasks of one event loop,
and python tasks run in threads of their own. Swapping ``sys.stdout`` around a task would catch
every other task's output too, so the streams are replaced once by proxies that look up the
*current task run's* buffer in a :class:`~contextvars.ContextVar` and write there, or to the real
stream when no task run is being captured. An asyncio task has its own copy of the context, and a
thread started with a copy of it (``asyncio.to_thread`` does that; the python tool does it itself)
writes to the buffer of the run that started it. Log records go to the same buffer through one
handler on the root logger, keyed on the same variable.

A buffer keeps at most :data:`MAX_OUTPUT_BYTES` (plus a little slack, so that masking cannot leave
a secret's head visible at the cut); what is beyond is counted and reported by a marker. Masking
and the cut happen in :meth:`TaskOutput.render`, with the command's own masker.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TextIO

from noetl.host import logs

MAX_OUTPUT_BYTES = 64 * 1024  # per task run; the rest is dropped and counted
INLINE_OUTPUT_BYTES = 8 * 1024  # larger output travels by reference (the results object store)
_SLACK = 4 * 1024  # kept beyond the cap until masked: a secret cut in two would escape the masker
# the engine's and the NATS client's own records are the worker's, not the task's
_OWN_LOGGERS = ("noetl", "nats", "asyncio")

_current: ContextVar[TaskOutput | None] = ContextVar("noetl_task_output", default=None)
_install_lock = threading.Lock()


class TaskOutput:
    """One task run's output: written from the loop and from the task's thread, read once."""

    def __init__(self, cap: int = MAX_OUTPUT_BYTES) -> None:
        self.cap = cap
        self._parts: list[str] = []
        self._kept = 0  # bytes (UTF-8) in _parts
        self.dropped = 0  # bytes written beyond what is kept
        self.closed = False
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        size = len(text.encode("utf-8", "replace"))
        with self._lock:
            room = self.cap + _SLACK - self._kept
            if size <= room:
                self._parts.append(text)
                self._kept += size
            else:
                head = text.encode("utf-8", "replace")[: max(room, 0)].decode("utf-8", "ignore")
                if head:
                    self._parts.append(head)
                kept = len(head.encode("utf-8"))
                self._kept += kept
                self.dropped += size - kept
        return len(text)

    def raw(self) -> str:
        with self._lock:
            return "".join(self._parts)

    def render(self, mask: Callable[[str], str] = lambda t: t) -> str:
        """The output as it may be shown and stored: masked, then cut to ``cap`` bytes with a
        marker saying how much is missing. Empty when the run wrote nothing."""
        text = mask(self.raw())
        data = text.encode("utf-8", "replace")
        missing = self.dropped
        if len(data) > self.cap:
            missing += len(data) - self.cap
            text = data[: self.cap].decode("utf-8", "ignore")
        if missing:
            if text and not text.endswith("\n"):
                text += "\n"
            text += f"[output truncated: {missing} more bytes not kept; the limit is {self.cap} bytes]\n"
        return text


class _StreamProxy:
    """``sys.stdout``/``sys.stderr``: the current task run's buffer, else the real stream."""

    def __init__(self, real: TextIO) -> None:
        self._real = real

    def write(self, text: str) -> int:
        buf = _current.get()
        if buf is None:
            return self._real.write(text)
        if buf.closed:  # a task's thread still running after its run ended (a time-out)
            return self._real.write(logs.mask(text))
        return buf.write(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        buf = _current.get()
        if buf is None or buf.closed:
            self._real.flush()

    def isatty(self) -> bool:
        buf = _current.get()
        return self._real.isatty() if buf is None or buf.closed else False

    def __getattr__(self, name: str) -> Any:  # encoding, fileno, buffer, ...: the real stream's
        return getattr(self._real, name)


class _CaptureHandler(logging.Handler):
    """Log records emitted while a task run is captured, as ``LEVEL logger: message`` lines."""

    def __init__(self) -> None:
        super().__init__(logging.NOTSET)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        buf = _current.get()
        if buf is None or buf.closed:
            return
        if any(record.name == own or record.name.startswith(own + ".") for own in _OWN_LOGGERS):
            return
        try:
            buf.write(self.format(record) + "\n")
        except Exception:  # a record that cannot be formatted must not fail the task
            self.handleError(record)


_HANDLER = _CaptureHandler()


def install() -> None:
    """Put the proxies and the log handler in place, once (again after a test swapped the
    streams). A stream handler of the logging set-up that writes to a proxy is pointed at the
    real stream, so a worker's own log line is never taken for the task's output."""
    with _install_lock:
        for name in ("stdout", "stderr"):
            stream = getattr(sys, name)
            if stream is not None and not isinstance(stream, _StreamProxy):
                setattr(sys, name, _StreamProxy(stream))
        root = logging.getLogger()
        if _HANDLER not in root.handlers:
            root.addHandler(_HANDLER)
        for handler in root.handlers:
            stream = getattr(handler, "stream", None)
            if isinstance(stream, _StreamProxy) and isinstance(handler, logging.StreamHandler):
                handler.stream = stream._real


@contextlib.contextmanager
def capturing(cap: int = MAX_OUTPUT_BYTES) -> Iterator[TaskOutput]:
    """Within this block (and in threads started with a copy of its context) what is printed to
    stdout or stderr and what is logged goes to the returned buffer."""
    install()
    buf = TaskOutput(cap)
    token = _current.set(buf)
    try:
        yield buf
    finally:
        _current.reset(token)
        buf.closed = True  # a thread still running after a time-out writes to the real stream


def current() -> TaskOutput | None:
    return _current.get()
