from typing import Any

import pytest

from noetl.dsl.errors import ToolError
from noetl.worker.tools.workbook import resolve_workbook

TASKS: dict[str, dict[str, Any]] = {
    "fetch": {
        "kind": "http",
        "url": "http://x/a",
        "headers": {"A": "1", "B": "2"},
        "spec": {"timeout": 5, "policy": {"rules": [{"else": {"then": {"do": "continue"}}}]}},
    },
    "fetch_b": {"kind": "workbook", "task": "fetch", "headers": {"B": "3"}},
    "loop_a": {"kind": "workbook", "task": "loop_b"},
    "loop_b": {"kind": "workbook", "task": "loop_a"},
}


def test_caller_fields_win_maps_merge_lists_replace() -> None:
    kind, fields = resolve_workbook(
        {
            "kind": "workbook",
            "task": "fetch",
            "headers": {"B": "x"},
            "spec": {"policy": {"rules": [{"else": {"then": {"do": "fail"}}}]}},
        },
        "workbook",
        TASKS,
    )
    assert kind == "http"
    assert fields == {
        "url": "http://x/a",
        "headers": {"A": "1", "B": "x"},
        "spec": {"timeout": 5, "policy": {"rules": [{"else": {"then": {"do": "fail"}}}]}},
    }


def test_template_is_not_mutated() -> None:
    resolve_workbook({"task": "fetch", "headers": {"C": "3"}}, "workbook", TASKS)
    assert TASKS["fetch"]["headers"] == {"A": "1", "B": "2"}


def test_template_of_template() -> None:
    kind, fields = resolve_workbook({"task": "fetch_b"}, "workbook", TASKS)
    assert kind == "http"
    assert fields["headers"] == {"A": "1", "B": "3"}
    assert "task" not in fields


def test_other_kinds_pass_through() -> None:
    assert resolve_workbook({"result": 1}, "noop", TASKS) == ("noop", {"result": 1})


def test_unknown_name_lists_known() -> None:
    with pytest.raises(ToolError, match=r"'nope' is not defined.*known: fetch, fetch_b, loop_a, loop_b"):
        resolve_workbook({"task": "nope"}, "workbook", TASKS)


def test_cycle_is_an_error() -> None:
    with pytest.raises(ToolError, match="cycle: loop_a -> loop_b -> loop_a"):
        resolve_workbook({"task": "loop_a"}, "workbook", TASKS)


def test_missing_task_field() -> None:
    with pytest.raises(ToolError, match="needs `task`"):
        resolve_workbook({}, "workbook", TASKS)
