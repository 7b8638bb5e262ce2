"""Live progress of an execution on a terminal: ``noetl run`` and ``noetl exec --wait``.

A long playbook run used to print nothing until its summary. On a terminal (stdout and stderr
both a TTY, no ``--json``) the execution's events are followed and drawn on stderr: a line when a
step ends (with its loop's counts, or its error), a line per failed iteration (the first few of
each step), the lines each task printed, and one status line rewritten in place (``\\r``) with the
running steps, their loop counters and a bar for long loops, at most ten times a second.
Everything is plain ANSI; nothing is drawn when the output is a file or a pipe, where ``\\r``
would only make a mess, except task output, which ``noetl run`` always showed on stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from noetl.cli.lines import error_text, output_lines, where
from noetl.client.activity import Activity, StepRun
from noetl.client.execution_view import OPEN
from noetl.events.port import Bus
from noetl.events.vocabulary import EventName

log = logging.getLogger("noetl.cli")

INTERVAL = 0.1  # seconds between redraws of the status line: ~10 a second at most
BAR_MIN_TOTAL = 20  # a loop this long or longer gets a bar
BAR_WIDTH = 20
FAILED_SHOWN = 5  # failed iterations of one step shown on a line of their own
_CLEAR = "\r\x1b[K"


def wanted(json_output: bool, stdout: TextIO | None = None, stderr: TextIO | None = None) -> bool:
    """Live progress only for a person at a terminal: with ``--json``, or with either stream
    redirected (``noetl run x.yaml > out``), nothing is drawn."""
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    return not json_output and _isatty(stdout) and _isatty(stderr)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _elapsed(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:4.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes < 60 else f"{minutes // 60}h{minutes % 60:02d}m"


class Progress:
    """Draws an execution's events on ``stream``. ``live``: the status line, step lines and
    colours (a terminal); otherwise only task output lines. Feed it events in log order: the
    status line renders the read-side projection they build (``noetl.client.activity``)."""

    def __init__(
        self,
        stream: TextIO,
        *,
        live: bool,
        width: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float = INTERVAL,
    ) -> None:
        self.stream, self.live, self.clock, self.interval = stream, live, clock, interval
        self.width = width
        self.activity = Activity()
        self._t0 = clock()
        self._started: dict[str, float] = {}  # step run id -> when it was first seen
        self._failed_shown: dict[str, set[Any]] = {}  # step run id -> failed iterations on a line
        self._last_draw = float("-inf")
        self._status = ""  # the status line on screen now ("" when none)
        self._closed = False
        self.nats_url: str | None = None  # where `noetl signal` reaches the execution (noetl run)
        glyphs = "\u2713\u2717\u2588\u2591"
        try:
            glyphs.encode(getattr(stream, "encoding", None) or "ascii")
        except (UnicodeEncodeError, LookupError):
            glyphs = "+x#-"
        self._ok, self._bad, self._full, self._empty = tuple(glyphs)

    def _color(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.live else text

    def _print(self, line: str) -> None:
        """A line that stays: the status line is cleared first and drawn again at the next tick
        that is due (a burst of task output must not redraw it once per line)."""
        if self._status:
            self.stream.write(_CLEAR)
            self._status = ""
        self.stream.write(line + "\n")
        self.stream.flush()

    def feed(self, ev: dict[str, Any]) -> None:
        if self._closed:
            return
        name: EventName | None = ev.get("name")  # so each name compared below is checked
        run = self.activity.feed(ev)
        if run is not None:
            self._started.setdefault(run.run_id, self.clock())
        if name == "task.done" and "output" in (ev.get("payload") or {}):
            p = ev["payload"]
            entry = {
                "step": self.activity.step_of(ev),
                "index": self.activity.index_of(ev),
                "task": p.get("task", ev.get("entity_id")),
                "output": p["output"] if isinstance(p["output"], str) else "[output stored by reference]",
            }
            for line in output_lines(entry):
                self._print(self._color("2", line) if self.live else line)
        if name == "step.waiting":
            self._print(self.waiting_line(ev))
        if not self.live or run is None:
            self.tick()
            return
        if name == "loop.iteration.failed":
            shown = self._failed_shown.setdefault(run.run_id, set())
            index = (ev.get("payload") or {}).get("index")
            if len(shown) < FAILED_SHOWN and index not in shown:  # a redelivery repeats the event
                shown.add(index)
                err = error_text((ev.get("payload") or {}).get("error"))
                self._print(f"{self._color('31', self._bad)} {where(run.step, index)}  {err}")
        elif name in ("step.done", "loop.done", "step.failed"):
            self._ended(run)
        self.tick()

    def waiting_line(self, ev: dict[str, Any]) -> str:
        """What a step waits for and the command that sends it (issue 31): without it a run of an
        approval showed only a step that never ended."""
        p = _d if isinstance(_d := ev.get("payload"), dict) else {}
        sig = str(p.get("signal") or "?")
        limit = f" (signal_timeout after {p['timeout_s']} s)" if p.get("timeout_s") else ""
        url = f" --nats-url {self.nats_url}" if self.nats_url else ""
        data = " --data '{\"approved\": true}'"
        return (
            f"{self._color('35', '…')} {ev.get('entity_id')} waits for signal {sig}{limit}; send it with: "
            f"noetl signal {ev.get('execution_id')} {sig}{data}{url}"
        )

    def _ended(self, run: StepRun) -> None:
        took = _elapsed(self.clock() - self._started.get(run.run_id, self._t0)).strip()
        counts = ""
        if run.announced_loop is not None:
            done, failed = run.announced_loop.ended_counts()
            total = run.announced_loop.total
            counts = f"  {done} done" + (f", {failed} failed" if failed else "") + f" of {total}"
        if run.status == "failed":
            err = error_text(run.error)
            tail = f"  {err}" if err else ""
            self._print(f"{self._color('31', self._bad)} {run.step}{counts}  {took}{tail}")
        else:
            self._print(f"{self._color('32', self._ok)} {run.step}{counts}  {took}")

    def status_line(self) -> str:
        """The running steps with their loop counters, behind the time since the start."""
        parts: list[str] = []
        bar_drawn = False
        for run in self.activity.runs.values():
            if run.status not in OPEN:  # a step waiting for its signal is on the line too
                continue
            lp = run.announced_loop
            if lp is None:
                parts.append(run.step)
                continue
            done, failed = lp.ended_counts()
            total = lp.total if isinstance(lp.total, int) else None
            text = run.step
            if total is not None:
                if not bar_drawn and total >= BAR_MIN_TOTAL:
                    filled = BAR_WIDTH * (done + failed) // max(total, 1)
                    text += " " + self._full * filled + self._empty * (BAR_WIDTH - filled)
                    bar_drawn = True
                text += f" {done + failed}/{total}"
            if failed:
                text += f" ({failed} failed)"
            if run.in_flight:
                text += f" {run.in_flight} running"
            parts.append(text)
        line = f"{_elapsed(self.clock() - self._t0)}  " + ("  |  ".join(parts) if parts else "waiting")
        width = self.width or shutil.get_terminal_size((80, 24)).columns
        return line[: max(width - 1, 10)]  # a wrapped line could not be rewritten in place

    def tick(self, force: bool = False) -> None:
        """Redraw the status line when ``interval`` has passed since the last drawing."""
        if not self.live or self._closed:
            return
        now = self.clock()
        if not force and now - self._last_draw < self.interval:
            return
        self._last_draw = now
        line = self.status_line()
        if line != self._status:
            self.stream.write(_CLEAR + line)
            self.stream.flush()
            self._status = line

    def close(self) -> None:
        """Take the status line away: what follows (the summary) starts on a clean line."""
        if self._closed:
            return
        self._closed = True
        if self.live and self._status:
            self.stream.write(_CLEAR)
            self.stream.flush()
            self._status = ""


async def _follow(bus: Bus, execution_id: str, progress: Progress, finished: asyncio.Event) -> None:
    """Feed ``progress`` the execution's events until ``playbook.processed``, or until the run is
    over and nothing is left. Not live, output is all it shows: then only ``task.done`` and the
    ``step.scheduled`` that name its step are read (a loop of a million iterations would
    otherwise cost this process, the worker's own in ``noetl run``, two more events each), and
    ``playbook.processed``, once per execution: without it the end was only known from an empty
    read, which made every run wait one more ``interval`` (100 ms) after its result was in."""
    from noetl.events import subjects as s
    from noetl.events.batches import BATCHED, events_in
    from noetl.events.objects import is_reference, resolve

    names = None if progress.live else ("step.scheduled", "task.done", "step.waiting", "playbook.processed")
    subjects = (
        [s.execution_events_filter(execution_id)]
        if names is None
        else [s.execution_event_filter(execution_id, n) for n in (*names, BATCHED)]
    )
    reader = await bus.reader(s.EVENTS_STREAM, subjects)
    try:
        while True:
            msgs = await reader.fetch(256, progress.interval)  # a lost reader ends the display
            if not msgs:
                if finished.is_set():  # the run is over and every stored event has been shown
                    return
                progress.tick()
                continue
            for ev in (e for msg in msgs for e in events_in(msg.data)):
                if names is not None and ev.get("name") not in names:
                    continue  # the rest of a batch
                p = ev.get("payload")
                if isinstance(p, dict) and is_reference(p.get("output")):
                    with contextlib.suppress(Exception):  # shown as "stored by reference" instead
                        p["output"] = await resolve(bus, p["output"])
                progress.feed(ev)
                if ev.get("name") == "playbook.processed":
                    return
    finally:
        with contextlib.suppress(Exception):
            await reader.close()


async def _following(bus: Bus, execution_id: str, progress: Progress, finished: asyncio.Event) -> None:
    try:
        await _follow(bus, execution_id, progress, finished)
    except asyncio.CancelledError:
        raise
    except Exception as e:  # progress is a courtesy: its failure must not fail the run
        log.debug("progress stopped following %s: %s", execution_id, e)


async def run_with_progress(
    bus: Bus, request: dict[str, Any], timeout: float | None, progress: Progress | None
) -> dict[str, Any]:
    """``run_and_wait`` while ``progress`` draws the execution's events; the status line is gone
    when this returns, even on a time-out or Ctrl-C."""
    from noetl.client.run import run_and_wait
    from noetl.events.ids import execution_id_for

    if progress is None:
        return await run_and_wait(bus, request, timeout=timeout)
    execution_id = request.get("execution_id") or execution_id_for(request["request_id"])
    finished = asyncio.Event()
    follower = asyncio.create_task(_following(bus, execution_id, progress, finished))
    try:
        out = await run_and_wait(bus, request, timeout=timeout)
        finished.set()
        await asyncio.wait({follower}, timeout=5)  # the rest of the log is stored: catch up
        return out
    finally:
        if not follower.done():
            follower.cancel()
            await asyncio.wait({follower})
        progress.close()
