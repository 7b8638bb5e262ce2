"""The console's drawing and reading of an execution, without a server: the layered graph of a
playbook and the fold of its events into step runs, tasks and loop progress."""

from __future__ import annotations

from pathlib import Path

from noetl.dsl.validate import load_playbook
from noetl.server.console.fold import fold, timeline
from noetl.server.console.graph import layout
from noetl.server.console.render import render

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"

CYCLE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cycle}
workflow:
  - step: start
    next: {arcs: [{step: fetch}]}
  - step: fetch
    tool: {kind: noop, result: 1}
    next:
      arcs:
        - step: fetch
          when: "{{ event.result < 0 }}"
        - step: start
          when: "{{ event.result > 5 }}"
        - step: done
  - step: done
    tool: {kind: noop}
  - step: orphan
    tool: {kind: noop}
"""


def test_layers_follow_breadth_first_depth_and_back_arcs_go_round() -> None:
    g = layout(load_playbook(CYCLE))
    y = {n.name: n.y for n in g.nodes}
    assert y["start"] < y["fetch"] < y["done"] < y["orphan"]  # the unreachable step goes last
    edges = {(e.source, e.target): e for e in g.edges}
    assert not edges[("start", "fetch")].back and not edges[("fetch", "done")].back
    assert edges[("fetch", "fetch")].back and edges[("fetch", "start")].back
    assert edges[("fetch", "start")].label == "event.result > 5"
    assert all(n.x + n.w <= g.width and n.y + n.h <= g.height for n in g.nodes)
    assert all(e.lx <= g.width for e in g.edges)


def test_fan_out_sits_side_by_side_and_shapes_say_what_a_step_is() -> None:
    g = layout(load_playbook((EXAMPLES / "admission_join.yaml").read_text()))
    nodes = {n.name: n for n in g.nodes}
    assert nodes["extract_users"].y == nodes["extract_orders"].y
    assert nodes["extract_users"].x != nodes["extract_orders"].x
    assert nodes["start"].shape == "router" and nodes["join"].what == "1 task, admission"
    assert all(e.inclusive for e in g.edges if e.source == "start")
    loop = layout(load_playbook((EXAMPLES / "loop_parallel.yaml").read_text()))
    assert next(n for n in loop.nodes if n.name == "start").what == "loop parallel over file"


def _ev(name: str, entity: str = "", rid: str = "", t: int = 0, **payload: object) -> dict[str, object]:
    return {
        "name": name,
        "entity_id": entity,
        "step_run_id": rid or None,
        "task_run_id": payload.pop("task_run_id", None),
        "timestamp": f"2026-01-01T00:00:{t:02d}+00:00",
        "payload": payload,
    }


EVENTS = [
    _ev("playbook.execution.requested", "etl/daily", t=0, path="etl/daily", version="2", payload={"n": 1}),
    _ev("step.scheduled", "start", "r1", 0, args={}),
    _ev("step.done", "start", "r1", 0, result=None),
    _ev("next.evaluated", "start", "r1", 0, fired=[{"step": "each", "arc": 0}]),
    _ev("step.scheduled", "each", "r2", 1, args={}),
    _ev("loop.started", "each", "r2", 1, total=3, mode="parallel", iterator="x"),
    _ev("task.started", "t", "r2", 1, task="t", kind="python", attempt=1, task_run_id="k1"),
    _ev("task.done", "t", "r2", 2, task="t", task_run_id="k1", outcome={"status": "ok", "result": 1}),
    _ev("loop.iteration.done", "each", "r2", 2, index=0, worker="w1"),
    _ev("task.started", "t", "r2", 2, task="t", kind="python", attempt=1, task_run_id="k2"),
    _ev(
        "task.done",
        "t",
        "r2",
        3,
        task="t",
        task_run_id="k2",
        outcome={"status": "error", "error": {"kind": "python_error", "message": "ValueError: bad"}},
    ),
    _ev("loop.iteration.failed", "each", "r2", 3, index=1, error={"kind": "python_error", "message": "bad"}),
]


def test_fold_reads_runs_tasks_and_loop_progress_while_running() -> None:
    view = fold("e1", EVENTS)
    assert view.status == "running" and view.path == "etl/daily" and view.version == "2"
    assert view.step_state("start") == ("done", "done 0 ms")
    assert view.step_state("each") == ("running", "1/3 done · 1 failed")
    assert view.step_state("never") == ("notrun", "not run")
    each = view.step_runs("each")[0]
    assert [t.status for t in each.tasks] == ["ok", "error"] and each.tasks[1].error[
        "message"
    ] == "ValueError: bad"
    assert each.worker == "w1" and view.arcs[("start", 0)] == 1
    tl = timeline(view)
    assert len(tl.bars) == 2 and tl.bars[1].x > tl.bars[0].x


def test_fold_ends_runs_a_finished_execution_left_behind() -> None:
    events = [
        *EVENTS,
        _ev("execution.cancel.requested", "e1", t=4, reason="enough"),
        _ev(
            "workflow.finished",
            "e1",
            t=5,
            status="cancelled",
            error={"kind": "cancelled", "message": "enough"},
        ),
        _ev("playbook.processed", "e1", t=5, status="error"),
    ]
    view = fold("e1", events)
    assert view.status == "cancelled" and view.finished and view.cancel_requested == "enough"
    assert view.step_state("each")[0] == "stopped" and view.duration_ms == 5000.0


def test_fragments_escape_what_playbooks_and_tasks_write() -> None:
    events = [
        _ev("playbook.execution.requested", "<script>x</script>", t=0),
        _ev("step.scheduled", "s", "r1", 0),
        _ev(
            "step.failed",
            "s",
            "r1",
            1,
            error={"kind": "python_error", "message": "<img src=x onerror=alert(1)>"},
        ),
    ]
    view = fold("e1", events)
    html = render("_summary.html", view=view, actions=[]) + render("_timeline.html", view=view, actions=[])
    assert "<img" not in html and "&lt;img src=x" in html and "<script>" not in html


WAITING = [
    _ev("playbook.execution.requested", "ops/approve", t=0, path="ops/approve", schedule="nightly"),
    _ev("step.scheduled", "start", "r1", 0, args={}),
    _ev("step.done", "start", "r1", 0, result=None),
    _ev("step.waiting", "approve", "r2", 1, args={}, signal="approval", timeout_s=90),
    _ev("step.waiting", "second", "r3", 2, args={}, signal="sign-off", timeout_s=None),
    _ev("execution.paused", "e1", t=3, reason="lunch"),
]


def test_fold_says_what_an_execution_waits_for_and_which_schedule_started_it() -> None:
    """SEMANTICS §17, §18: the step runs waiting for a signal, since when and until when; paused."""
    view = fold("e1", WAITING)
    assert view.schedule == "nightly" and view.paused and view.status == "running"
    assert [(w.step, w.signal, w.since, w.until) for w in view.waiting] == [
        ("approve", "approval", "2026-01-01T00:00:01+00:00", "2026-01-01T00:01:31+00:00"),
        ("second", "sign-off", "2026-01-01T00:00:02+00:00", None),
    ]
    assert view.step_state("approve") == ("waiting", "waits for approval")
    html = render("_summary.html", view=view, actions=[])
    assert '<dd id="schedule">nightly</dd>' in html and 'id="paused"' in html
    assert "fails with signal_timeout at 2026-01-01 00:01:31 (90 s)" in html

    # the signal comes for approve (it runs, then is done); sign-off never comes and times out
    later = [
        *WAITING,
        _ev("execution.resumed", "e1", t=4),
        _ev("signal.received", "e1", t=5, signal="approval", data={"approved": True}),
        _ev("step.scheduled", "approve", "r2", 5, args={"signal": {"approved": True}}),
    ]
    view = fold("e1", later)
    assert not view.paused and [w.step for w in view.waiting] == ["second"]
    assert view.step_state("approve")[0] == "running"
    view = fold(
        "e1",
        [
            *later,
            _ev("step.done", "approve", "r2", 5, result={"approved": True}),
            _ev("step.failed", "second", "r3", 9, error={"kind": "signal_timeout", "message": "none came"}),
        ],
    )
    assert view.step_state("approve")[0] == "done" and view.step_state("second")[0] == "failed"
    assert view.waiting == []


def test_issue31_small_items_stopped_iterations_joins_root_cause_and_a_waiting_duration() -> None:
    """Iterations a cancel stopped are not failures; a join not admitted yet is not `skipped`; the
    first failure is named as the root cause of a later one; a running execution's duration keeps
    counting; the timeline's last tick label ends at the axis instead of being cut."""
    events = [
        *EVENTS,
        _ev(
            "loop.iteration.failed", "each", "r2", 4, index=2, error={"kind": "cancelled", "message": "stop"}
        ),
        _ev("step.skipped", "join", "r3", 4, args={}),
    ]
    view = fold("e1", events)
    assert view.step_state("each") == ("running", "1/3 done · 1 failed · 1 stopped")
    assert view.step_state("join") == ("notrun", "not admitted yet (1x)")
    assert view.duration_ms is not None and view.duration_ms > 60_000  # until now, not the last event
    finished = [
        *EVENTS[:4],
        _ev("step.scheduled", "fetch", "r5", 1, args={}),
        _ev("step.failed", "fetch", "r5", 2, error={"kind": "python_error", "message": "ValueError: x"}),
        _ev(
            "workflow.finished", "e1", t=3, status="failed", error={"kind": "template_error", "message": "y"}
        ),
        _ev("playbook.processed", "e1", t=3, status="error"),
    ]
    view = fold("e1", finished)
    assert view.root_cause is not None and view.root_cause.step == "fetch"
    assert view.step_state("fetch")[0] == "failed"
    html = render("_summary.html", view=view, actions=[], request_id="x")
    assert 'id="root-cause"' in html and "python_error" in html and "template_error" in html
    tl = render("_timeline.html", view=view, timeline=timeline)
    assert 'class="tick-label tick-end"' in tl


def test_labels_of_arcs_that_meet_are_not_drawn_over_each_other() -> None:
    """Issue 31: two arcs between the same steps put their labels on one point."""
    twice = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: twice}
workflow:
  - step: start
    tool: {kind: noop, result: 1}
    next:
      arcs:
        - {step: done, when: "{{ event.result > 100 }}", args: {size: big}}
        - {step: done, when: "{{ event.result > 10 }}", args: {size: medium}}
        - {step: done, args: {size: small}}
  - step: done
    tool: {kind: noop}
"""
    g = layout(load_playbook(twice))
    boxes = [
        (e.lx - 3.2 * len(e.label), e.ly - 13, e.lx + 3.2 * len(e.label), e.ly) for e in g.edges if e.label
    ]
    assert len(boxes) == 3
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not (a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]), (a, b)
