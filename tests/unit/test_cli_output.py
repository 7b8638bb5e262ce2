"""What `noetl run` and `noetl status` print for a failed execution: the error's message and the
playbook line it points at."""

from __future__ import annotations

from typing import Any

from noetl.cli.output import _parse_path, error_line, summary

TEXT = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t, path: tests/t, version: '2'}
workflow:
  - step: start
    tool:
      - name: show
        kind: noop
        result:
          "x-y": "{{ iter.num }}"
"""


def _failed(error: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "execution_id": "e1",
        "status": "failed",
        "steps": {"start": [{"status": "failed"}]},
        "error": error,
        **extra,
    }


def test_paths_parse_back_into_segments() -> None:
    assert _parse_path("workflow[0].tool[1].result") == ("workflow", 0, "tool", 1, "result")
    assert _parse_path('workflow[0].tool[0].result["x-y"]') == ("workflow", 0, "tool", 0, "result", "x-y")
    assert _parse_path("workflow[0].tool[0].result.x-y") == ("workflow", 0, "tool", 0, "result", "x-y")
    assert _parse_path("workflow[0] tool") is None


def test_error_line_from_playbook_line_or_path() -> None:
    assert error_line({"playbook_line": 7, "path": "workflow[0]"}, TEXT) == 7
    assert error_line({"path": 'workflow[0].tool[0].result["x-y"]'}, TEXT) == 10
    assert error_line({"path": "workflow[0].tool[0].nothing.deeper"}, TEXT) == 7  # nearest ancestor
    assert error_line({"path": "workflow[0]"}, None) is None
    assert error_line({"kind": "cancelled"}, TEXT) is None


def test_summary_names_the_file_and_line_of_the_error() -> None:
    err = {
        "kind": "template_error",
        "message": "'iter.num' is undefined (iter has: index, n) in ...",
        "path": 'workflow[0].tool[0].result["x-y"]',
    }
    assert summary(_failed(err), "t.yaml", TEXT).splitlines() == [
        "execution e1: failed",
        "  start: failed",
        "error: template_error: 'iter.num' is undefined (iter has: index, n) in ...",
        "  at t.yaml:10",
    ]
    py = {"kind": "python_error", "message": "KeyError: 'a' (...)", "playbook_line": 12}
    shown = summary(_failed(py, path="tests/t", version="2"))
    assert shown.endswith(
        "error: python_error: KeyError: 'a' (...)\n  at line 12 of playbook tests/t version 2"
    )
    assert summary(_failed(err)).endswith("in ...")  # no file, no line to name
