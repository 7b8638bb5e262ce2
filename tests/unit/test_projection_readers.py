"""Issue 28: the readings of an execution render one projection of its events. These pin what
the projection gained for them: iteration rows, task runs by id, the order runs are listed in,
in-flight iterations, the server's counts, and the fold fed one event at a time."""

from __future__ import annotations

from typing import Any

from noetl.client.activity import loop_counts, read_activity
from noetl.client.iterations import iteration_page, loop_runs, task_runs
from noetl.client.projection import Projection, fold, folded, waits_of
from noetl.client.view import execution_output


def _ev(name: str, entity: str, rid: str | None = None, t: int = 0, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "entity_type": name.split(".")[0] if name.split(".")[0] in ("step", "loop", "task") else "workflow",
        "entity_id": entity,
        "timestamp": f"2026-01-01T00:00:{t:02d}+00:00",
        "execution_id": "e1",
    }
    if rid is not None:
        out["step_run_id"] = rid
    out.update(extra)
    return out


def _loop(total: int = 4) -> list[dict[str, Any]]:
    def task(index: int, t: int, attempt: int = 1) -> dict[str, Any]:
        p = {"task": "w", "index": index, "kind": "python", "attempt": attempt}
        return _ev("task.started", "w", "r1", t, task_run_id=f"k{index}.{attempt}", payload=p)

    failed = {"index": 1, "error": {"kind": "python_error", "message": "bad", "retryable": False}}
    return [
        _ev("playbook.execution.requested", "p", None, 0, payload={"path": "p"}),
        _ev("step.scheduled", "each", "r1", 0, payload={"args": {}}),
        _ev("loop.started", "each", "r1", 1, payload={"total": total, "mode": "parallel"}),
        task(0, 1),
        task(1, 1),
        task(1, 2, attempt=2),
        task(2, 2),
        _ev("task.done", "w", "r1", 3, task_run_id="k0.1", payload={"outcome": {"status": "ok"}}),
        _ev("loop.iteration.done", "each", "r1", 3, payload={"index": 0, "worker": "w1"}),
        _ev("loop.iteration.failed", "each", "r1", 4, payload=failed),
        _ev("loop.iteration.failed", "each", "r1", 5, payload={"index": 3, "error": {"kind": "cancelled"}}),
    ]


def test_iteration_rows_carry_status_attempts_tasks_and_duration() -> None:
    loop = fold("e1", _loop()).runs[0].loop
    assert loop is not None and loop.announced
    rows = loop.rows
    assert [rows[i].status for i in sorted(rows)] == ["done", "failed", "running", "stopped"]
    assert (rows[1].attempts, rows[1].tasks, rows[1].duration_ms) == (2, 2, 3000.0)
    assert rows[0].worker == "w1" and rows[0].duration_ms == 2000.0
    assert rows[3].started == rows[3].ended and rows[3].tasks == 0  # ended without a task run
    assert loop.running == {2}
    assert loop.ended_counts() == (1, 2)  # the server counts the stopped one as failed
    assert (loop.done_count, loop.failed_count) == (1, 1)  # the console does not


def test_the_server_count_is_the_last_word_and_ends_the_in_flight() -> None:
    events = [*_loop(), _ev("loop.done", "each", "r1", 6, payload={"total": 4, "done": 3, "failed": 1})]
    p = folded("e1", events)
    run = p.view.runs[0]
    assert run.status == "done" and run.in_flight == 0
    assert run.loop is not None and run.loop.ended_counts() == (3, 1)
    assert run.loop.running == {2}  # its row still says so: the iteration never reported an end
    assert loop_counts(run) == {"status": "done", "total": 4, "done": 3, "failed": 1, "in_flight": 0}


def test_rows_left_running_stop_when_the_execution_finishes_once_settled() -> None:
    end = _ev("workflow.finished", "e1", None, 9, payload={"status": "cancelled"})
    p = folded("e1", [*_loop(), end])
    assert p.view.runs[0].status == "running"  # not settled: as the log left it
    view = p.settle()
    row = view.runs[0].loop.rows[2] if view.runs[0].loop else None
    assert row is not None and (row.status, row.ended, row.duration_ms) == ("stopped", end["timestamp"], None)
    assert view.runs[0].status == "stopped"
    assert view.runs[0].loop is not None and view.runs[0].loop.running == set()
    page = iteration_page(loop_runs([*_loop(), end])["r1"], status="stopped")
    assert [r["index"] for r in page["iterations"]] == [2, 3]


def test_a_loop_only_counted_is_not_announced() -> None:
    events = [
        _ev("step.scheduled", "s", "r1", 0),
        _ev("loop.iteration.done", "s", "r1", 1, payload={"index": 0}),
    ]
    run = fold("e1", events).runs[0]
    assert run.loop is not None and not run.loop.announced and run.announced_loop is None
    assert loop_runs(events) == {} and run.in_flight == 0


def test_task_runs_by_id_in_the_order_they_started() -> None:
    view = fold("e1", _loop())
    assert list(view.tasks) == ["k0.1", "k1.1", "k1.2", "k2.1"]
    done = view.tasks["k0.1"]
    assert (done.status, done.step_run_id, done.task_run_id, done.index) == ("ok", "r1", "k0.1", 0)
    rows = task_runs(_loop())
    assert [(r["step"], r["task_run_id"], r["status"]) for r in rows][:2] == [
        ("each", "k0.1", "ok"),
        ("each", "k1.1", "running"),
    ]
    assert task_runs(_loop(), step="other") == []


def test_runs_are_listed_where_they_were_scheduled_or_ended_not_where_announced() -> None:
    events = [
        _ev("step.waiting", "approve", "r1", 0, payload={"signal": "ok"}),
        _ev("step.scheduled", "first", "r2", 1),
        _ev("step.failed", "early", "r3", 2, payload={"error": {"kind": "template_error"}}),
        _ev("step.scheduled", "approve", "r1", 3),
    ]
    view = fold("e1", events)
    assert [(r.step, r.listed) for r in view.runs] == [("approve", 4), ("first", 2), ("early", 3)]
    out = execution_output("e1", events[:1])
    assert out["steps"] == {} and out["status"] == "running"  # only waiting: not listed yet
    steps = execution_output("e1", events)["steps"]
    assert list(steps) == ["first", "early", "approve"]
    assert steps["early"] == [{"status": "failed", "result": None, "error": {"kind": "template_error"}}]


def test_fed_one_event_at_a_time_it_says_where_each_belongs() -> None:
    p = Projection("e1")
    events = _loop()
    assert p.feed(events[0]) is None  # no step run
    for ev in events[1:]:
        assert p.feed(ev) is p.by_id["r1"]
    done = {"name": "task.done", "task_run_id": "k1.2", "step_run_id": "r1"}
    assert p.index_of(done) == 1 and p.run_of(done) is p.by_id["r1"]
    assert p.index_of({"name": "task.done", "task_run_id": "nope"}) is None
    assert waits_of(p) == {"signals": [], "paused": False}
    activity = read_activity("e1", events)
    assert activity.loops()["each"][0]["in_flight"] == 1


def test_a_refused_request_is_still_a_child_of_its_parent() -> None:
    end = _ev("workflow.finished", "e1", None, 1, parent_execution_id="p1", payload={"status": "failed"})
    assert fold("e1", [end]).parent_execution_id == "p1"
    requested = _ev("playbook.execution.requested", "p", None, 0, parent_execution_id="p0", payload={})
    assert fold("e1", [requested, end]).parent_execution_id == "p0"


def test_a_step_event_the_view_skips_still_makes_its_run_known_to_the_terminal() -> None:
    """``step.cancelled`` has no handler in the fold; `noetl run`'s status line still shows the
    run from then on, as it did before it read the projection."""
    activity = read_activity("e1", [_ev("step.cancelled", "next", "r9", 0)])
    assert list(activity.runs) == ["r9"] and activity.runs["r9"].status == "running"
    assert activity.step_of({"step_run_id": "r9"}) == "next"
    assert activity.feed(_ev("task.done", "t", "elsewhere", 1)) is None  # a task names no step
    assert fold("e1", [_ev("step.cancelled", "next", "r9", 0)]).runs == []  # the console's view
