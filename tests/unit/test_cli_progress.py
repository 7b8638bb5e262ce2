"""Issue 19 on the terminal: the line per event of `noetl events`, the task output lines of
`noetl logs`, the loop counters of `noetl status` and the live progress of `noetl run`."""

from __future__ import annotations

import io
from typing import Any

from noetl.cli.lines import EventLines, output_lines, short_time
from noetl.cli.output import summary
from noetl.cli.progress import Progress, wanted
from noetl.client.activity import Activity, loop_counters, task_outputs

T = "2026-05-01T12:03:04.123456+00:00"
BAD = {"kind": "python_error", "message": "ValueError: bad"}


def ev(name: str, entity_type: str, entity_id: str, status: str = "success", **extra: Any) -> dict[str, Any]:
    """An event as on the wire: fields without a value are absent, not null."""
    out: dict[str, Any] = {
        "name": name,
        "entity_type": entity_type,
        "entity_id": entity_id,
        "status": status,
        "timestamp": T,
        "execution_id": "e1",
    }
    out.update(extra)
    return out


def loop_events(total: int = 30) -> list[dict[str, Any]]:
    return [
        ev("step.scheduled", "step", "crunch", "in_progress", step_run_id="r1", payload={"args": {}}),
        ev(
            "loop.started",
            "loop",
            "crunch",
            "in_progress",
            step_run_id="r1",
            payload={"total": total, "mode": "parallel", "iterator": "x"},
        ),
        ev(
            "task.started",
            "task",
            "work",
            "in_progress",
            step_run_id="r1",
            task_run_id="t0",
            payload={"task": "work", "index": 0, "kind": "python", "attempt": 1},
        ),
        ev(
            "task.started",
            "task",
            "work",
            "in_progress",
            step_run_id="r1",
            task_run_id="t1",
            payload={"task": "work", "index": 1, "kind": "python", "attempt": 1},
        ),
        ev(
            "task.started",
            "task",
            "work",
            "in_progress",
            step_run_id="r1",
            task_run_id="t2",
            payload={"task": "work", "index": 2, "kind": "python", "attempt": 1},
        ),
        ev(
            "task.done",
            "task",
            "work",
            step_run_id="r1",
            task_run_id="t0",
            payload={
                "task": "work",
                "index": 0,
                "outcome": {"status": "ok", "result": 0, "meta": {"duration_ms": 12.4, "attempt": 1}},
                "output": "did 0\nsecond line\n",
            },
        ),
        ev("loop.iteration.done", "loop", "crunch", step_run_id="r1", payload={"index": 0, "result": 0}),
        ev(
            "task.done",
            "task",
            "work",
            "error",
            step_run_id="r1",
            task_run_id="t1",
            payload={
                "task": "work",
                "outcome": {
                    "status": "error",
                    "error": {
                        "kind": "python_error",
                        "message": "ValueError: bad\nsecond line",
                        "retryable": False,
                    },
                },
            },
        ),
        ev(
            "loop.iteration.failed",
            "loop",
            "crunch",
            "error",
            step_run_id="r1",
            payload={"index": 1, "result": None, "error": BAD},
        ),
        ev(
            "loop.iteration.failed",
            "loop",
            "crunch",
            "error",
            step_run_id="r1",  # a redelivery repeats it
            payload={"index": 1, "result": None, "error": BAD},
        ),
    ]


def test_short_time_keeps_milliseconds() -> None:
    assert short_time(T) == "12:03:04.123"
    assert short_time("2026-05-01T12:03:04Z") == "12:03:04.000"
    assert short_time("2026-05-01T12:03:04.5Z") == "12:03:04.500"
    assert short_time(None) == "?"


def test_event_lines_name_step_iteration_status_and_error() -> None:
    lines = EventLines()
    shown = [lines.line(e) for e in loop_events()]
    assert shown[1] == (
        "12:03:04.123  loop.started           crunch                   in_progress 30 iterations (parallel)"
    )
    assert shown[2].split() == ["12:03:04.123", "task.started", "crunch[0].work", "in_progress", "python"]
    assert shown[5].split() == [
        "12:03:04.123",
        "task.done",
        "crunch[0].work",
        "success",
        "12",
        "ms",
        "output:",
        "2",
        "line(s)",
    ]
    # the task.done without an index is placed by its task.started; the message is one line
    assert shown[7].split()[2:] == [
        "crunch[1].work",
        "error",
        "python_error:",
        "ValueError:",
        "bad",
        "second",
        "line",
    ]
    assert shown[8].split()[2:] == ["crunch[1]", "error", "python_error:", "ValueError:", "bad"]
    finished = ev(
        "workflow.finished",
        "workflow",
        "e1",
        "error",
        payload={"status": "failed", "error": {"kind": "step_failed", "message": "crunch failed"}},
    )
    assert lines.line(finished).endswith("error       failed  step_failed: crunch failed")
    bare = lines.line({"name": "step.scheduled"})  # nothing but a name: no KeyError
    assert "step.scheduled" in bare


def test_loop_counters_for_status() -> None:
    events = loop_events()
    assert loop_counters(events) == {
        "crunch": [{"status": "running", "total": 30, "done": 1, "failed": 1, "in_flight": 1}]
    }
    end = ev(
        "step.failed",
        "step",
        "crunch",
        "error",
        step_run_id="r1",
        payload={
            "result": None,
            "error": {"kind": "python_error", "message": "x"},
            "total": 30,
            "done": 1,
            "failed": 1,
        },
    )
    assert loop_counters([*events, end])["crunch"] == [
        {"status": "failed", "total": 30, "done": 1, "failed": 1, "in_flight": 0}
    ]
    out = {
        "execution_id": "e1",
        "status": "running",
        "result": None,
        "steps": {"crunch": [{"status": "running"}]},
        "loops": loop_counters(events),
    }
    assert summary(out).splitlines()[1:3] == [
        "  crunch: running",
        "    loop: 1 done, 1 failed of 30, 1 in flight",
    ]


def test_task_outputs_and_their_lines() -> None:
    events = loop_events()
    entries = task_outputs(events)
    assert entries == [
        {
            "step": "crunch",
            "task": "work",
            "index": 0,
            "attempt": 1,
            "task_run_id": "t0",
            "timestamp": T,
            "status": "success",
            "output": "did 0\nsecond line\n",
        }
    ]
    assert task_outputs(events, step="other") == []
    assert output_lines(entries[0]) == ["crunch[0].work | did 0", "crunch[0].work | second line"]
    assert output_lines({"step": "s", "task": "t", "attempt": 2, "output": "x"}) == ["s.t (attempt 2) | x"]


class FakeTTY(io.StringIO):
    encoding = "utf-8"

    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_progress_draws_counters_a_bar_and_lines_that_stay() -> None:
    tty, clock = FakeTTY(), Clock()
    p = Progress(tty, live=True, width=100, clock=clock)
    for e in loop_events(total=40):
        clock.now += 0.2  # each event after the redraw interval: each one redraws
        p.feed(e)
    text = tty.getvalue()
    assert "\x1b[2mcrunch[0].work | did 0\x1b[0m\n" in text  # task output, dimmed, above the status
    assert "crunch[1]  python_error: ValueError: bad" in text  # a failed iteration gets a line
    assert text.count("crunch[1]  python_error") == 1  # the repeated event is not a second failure
    status = p.status_line()
    assert "crunch " + "\u2588" + "\u2591" * 19 + " 2/40 (1 failed) 1 running" in status
    clock.now += 1.0
    p.feed(
        ev("loop.done", "loop", "crunch", step_run_id="r1", payload={"total": 40, "done": 39, "failed": 1})
    )
    assert "\x1b[32m\u2713\x1b[0m crunch  39 done, 1 failed of 40" in tty.getvalue()
    assert p.status_line().endswith("waiting")
    p.close()
    assert tty.getvalue().endswith("\r\x1b[K")  # the summary starts on a clean line
    size = len(tty.getvalue())
    p.feed(loop_events()[0])  # nothing after close
    assert len(tty.getvalue()) == size


def test_progress_redraws_at_most_every_interval() -> None:
    tty, clock = FakeTTY(), Clock()
    p = Progress(tty, live=True, width=80, clock=clock)
    events = loop_events()
    p.feed(events[0])
    for e in events[1:5]:  # within 0.1 s: no redraw
        clock.now += 0.01
        p.feed(e)
    assert tty.getvalue().count("\r\x1b[K") == 1
    clock.now += 0.2
    p.tick()
    assert tty.getvalue().count("\r\x1b[K") == 2
    assert len(p.status_line()) <= 79  # never wraps: a wrapped line cannot be rewritten


def test_progress_that_is_not_live_prints_only_task_output() -> None:
    out = io.StringIO()
    p = Progress(out, live=False)
    for e in loop_events():
        p.feed(e)
    p.tick(force=True)
    p.close()
    assert out.getvalue() == "crunch[0].work | did 0\ncrunch[0].work | second line\n"


def test_progress_is_wanted_only_on_a_terminal_without_json() -> None:
    assert wanted(False, FakeTTY(), FakeTTY())
    assert not wanted(True, FakeTTY(), FakeTTY())
    assert not wanted(False, io.StringIO(), FakeTTY())  # `noetl run x.yaml > out`
    assert not wanted(False, FakeTTY(), io.StringIO())


def test_ascii_terminal_gets_ascii_glyphs() -> None:
    class AsciiTTY(FakeTTY):
        encoding = "ascii"

    tty, clock = AsciiTTY(), Clock()
    p = Progress(tty, live=True, width=100, clock=clock)
    for e in loop_events(total=40):
        clock.now += 0.2
        p.feed(e)
    assert "crunch #" + "-" * 19 + " 2/40" in p.status_line()
    tty.getvalue().encode("ascii")


def test_activity_ignores_events_of_unknown_runs() -> None:
    a = Activity()
    assert a.feed(ev("task.done", "task", "t", step_run_id="nope")) is None
    assert a.feed({"name": "loop.iteration.done"}) is None
    assert a.loops() == {}


def test_a_waiting_step_says_what_it_waits_for_and_how_to_send_it() -> None:
    """Issue 31: `noetl run` of an approval showed only a step that never ended; now a line names
    the signal and the command that sends it to the embedded NATS, live or not."""
    for live in (True, False):
        out = io.StringIO()
        p = Progress(out, live=live, width=200)
        p.nats_url = "nats://127.0.0.1:4999"
        p.feed(
            {
                "name": "step.waiting",
                "execution_id": "e" * 32,
                "entity_id": "approve",
                "step_run_id": "r1",
                "payload": {"signal": "approval", "timeout_s": 60},
            }
        )
        text = out.getvalue()
        assert "approve waits for signal approval (signal_timeout after 60 s)" in text
        assert (
            f"noetl signal {'e' * 32} approval --data '{{\"approved\": true}}' --nats-url nats://127.0.0.1:4999"
            in text
        )
