"""The commands' exit codes and output, run in-process through `noetl`'s parser."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl.cli.expect import compare
from noetl.cli.main import main
from noetl.dsl.analysis.coverage import coverage, trace
from noetl.dsl.analysis.mermaid import mermaid
from noetl.dsl.validate import load_playbook
from tests.unit.analysis.helpers import playbook

CLEAN = playbook("""
- step: start
  tool: {kind: noop}
  next: {arcs: [{step: after, when: "{{ event.name == 'step.done' }}"}, {step: fix}]}
- step: after
  tool: {kind: noop}
- step: fix
  tool: {kind: noop}
""")
WARN = CLEAN + "  - step: orphan\n    tool: {kind: noop}\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    out = {}
    for name, text in {
        "clean": CLEAN,
        "warn": WARN,
        "error": CLEAN.replace(
            "  - step: after\n    tool: {kind: noop}",
            '  - step: after\n    tool: {kind: noop, result: "{{ iter.x }}"}',
        ),
        "invalid": CLEAN.replace("kind: noop", "kind: teleport", 1),
    }.items():
        f = tmp_path / f"{name}.yaml"
        f.write_text(text)
        out[name] = str(f)
    return out


def test_check_exit_codes(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", files["clean"]]) == 0
    assert capsys.readouterr().out == f"{files['clean']}: clean\n"
    assert main(["check", files["warn"]]) == 0
    assert "warning[unreachable-step]" in capsys.readouterr().out
    assert main(["check", "--strict", files["warn"]]) == 1
    assert main(["check", files["error"], files["clean"]]) == 1
    out = capsys.readouterr().out
    assert f"{files['error']}:9: error[name-out-of-scope]: workflow[1].tool[0].result:" in out
    assert main(["check", files["invalid"], files["clean"]]) == 2
    assert "teleport" in capsys.readouterr().out
    assert main(["check", "--json", files["error"]]) == 1
    (entry,) = json.loads(capsys.readouterr().out)
    assert entry["findings"][0]["code"] == "name-out-of-scope" and entry["problems"] == []


def test_migrate_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    legacy = tmp_path / "old.yaml"
    legacy.write_text(
        CLEAN.replace("  - step: start\n", '  - step: start\n    when: "{{ workload.go }}"\n', 1)
    )
    out = tmp_path / "new.yaml"
    assert main(["migrate", str(legacy), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "rewrote: step `when` became admission" in err and "valid v10 playbook" in err
    assert main(["validate", str(out)]) == 0
    assert main(["migrate", str(tmp_path / "missing.yaml")]) == 2


def test_graph_command_static(files: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["graph", files["clean"]]) == 0
    text = capsys.readouterr().out
    assert text.startswith("flowchart TD\n") and "s0 -->|\"event.name == 'step.done'\"| s1" in text
    assert main(["graph", files["invalid"]]) == 2


def test_graph_from_an_events_file_checks_file_against_the_recorded_playbook(
    files: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl.dsl.cache import digest_of

    request = {
        "name": "playbook.execution.requested",
        "entity_id": "t",
        "payload": {"playbook": CLEAN, "digest": digest_of(CLEAN), "path": None, "version": None},
    }
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"events": [request, *_events()]}))
    assert main(["graph", "--events", str(run)]) == 0  # no FILE: the recorded text
    drawn = capsys.readouterr().out
    assert "class s1 failed" in drawn
    assert main(["graph", files["clean"], "--events", str(run)]) == 0
    assert capsys.readouterr().out == drawn
    assert main(["graph", files["warn"], "--events", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        f"noetl graph: the execution in {run} ran another playbook (no metadata.path, "
        f"digest {digest_of(CLEAN)[:12]}) than {files['warn']} (no metadata.path, digest "
    )
    assert err.rstrip().endswith(
        f"omit FILE to draw the execution's own playbook (noetl graph --events "
        f"{run}), or give the file it ran"
    )
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(_events()))  # no request event, no FILE
    assert main(["graph", "--events", str(bare)]) == 2
    assert "has no recorded request" in capsys.readouterr().err
    assert main(["graph"]) == 2


def _events() -> list[dict[str, Any]]:
    return [
        {
            "name": "step.scheduled",
            "entity_id": "start",
            "step_run_id": "r1",
            "timestamp": "2026-01-01T00:00:00Z",
        },
        {"name": "task.done", "entity_id": "start_task", "step_run_id": "r1"},
        {
            "name": "step.done",
            "entity_id": "start",
            "step_run_id": "r1",
            "timestamp": "2026-01-01T00:00:00.250Z",
        },
        {
            "name": "next.evaluated",
            "entity_id": "start",
            "step_run_id": "r1",
            "payload": {"fired": [{"step": "after", "arc": 0, "args": {}}]},
        },
        {
            "name": "step.scheduled",
            "entity_id": "after",
            "step_run_id": "r2",
            "timestamp": "2026-01-01T00:00:01Z",
        },
        {
            "name": "step.failed",
            "entity_id": "after",
            "step_run_id": "r2",
            "timestamp": "2026-01-01T00:00:03Z",
        },
    ]


def test_trace_coverage_and_mermaid_overlay() -> None:
    pb = load_playbook(CLEAN, "c.yaml")
    t = trace(_events())
    assert [(r.step, r.status, r.duration_ms) for r in t.runs.values()] == [
        ("start", "done", 250.0),
        ("after", "failed", 2000.0),
    ]
    c = coverage(pb, [t])
    assert c.missed_arcs == [("start", 1, "fix")] and c.missed_tasks == [
        ("after", "after_task"),
        ("fix", "fix_task"),
    ]
    text = mermaid(pb, t)
    assert "<b>start</b><br/>1 task<br/>done 250 ms" in text and "failed 2000 ms" in text
    assert "class s0 done" in text and "class s1 failed" in text and "class s2 notrun" in text
    assert "linkStyle 1 stroke:#2e7d32" in text and "linkStyle 2 stroke:#9e9e9e" in text


def test_expectations() -> None:
    out = {
        "status": "success",
        "result": 4,
        "ctx": {"a": {"b": 1}, "c": True},
        "steps": {"s": [{"status": "done"}]},
        "events": [{"name": "step.done"}],
        "error": None,
    }
    assert (
        compare(
            {
                "status": "success",
                "result": 4,
                "ctx": {"a": {"b": 1}},
                "steps": {"s": ["done"]},
                "event_count": {"step.done": 1},
            },
            out,
        )
        == []
    )
    assert compare({"result": 4.0}, out) == ["result 4, expected 4.0"]
    assert compare({"ctx": {"a": {"b": 2}}, "ctx_absent": ["c"], "steps_absent": ["s"]}, out) == [
        "ctx.a.b: expected 2, got 1",
        "ctx.c is set, expected it not to be",
        "step s ran, expected it not to",
    ]
    assert compare({"status": "failed"}, out) == ["status 'success', expected 'failed'"]
