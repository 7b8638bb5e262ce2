"""Events and commands are decoded once, at the edge, with their schema_version read (issue 16)."""

from __future__ import annotations

import pytest

from noetl.events.envelope import SCHEMA_VERSION, WireError, decode_command, decode_event, dumps, make_event


def _event(**over: object) -> dict[str, object]:
    ev: dict[str, object] = {
        **make_event(
            event_id="e",
            execution_id="x",
            timestamp="t",
            source="worker",
            name="step.done",
            entity_type="step",
            entity_id="s",
            status="success",
        )
    }
    ev.update(over)
    return ev


def test_an_event_of_this_version_and_one_with_unknown_fields_are_read() -> None:
    assert decode_event(dumps(_event()))["name"] == "step.done"
    assert dict(decode_event(dumps(_event(added_later=1))))["added_later"] == 1  # open world


def test_a_missing_version_reads_as_the_first() -> None:
    ev = _event()
    del ev["schema_version"]
    assert decode_event(dumps(ev))["event_id"] == "e"


@pytest.mark.parametrize(
    ("data", "says", "newer"),
    [
        (b"\x00garbage", "not JSON", False),
        (b"[1, 2]", "JSON list", False),
        (dumps({"event_id": "e"}), "execution_id, name, status", False),
        (dumps(_event(schema_version="1")), "not a whole number", False),
        (dumps(_event(payload=[1])), "field payload is [1], not an object", False),
        (dumps(_event(step_run_id=7)), "field step_run_id is 7, not text", False),
        (dumps(_event(schema_version=SCHEMA_VERSION + 1)), "upgrade it", True),
    ],
)
def test_what_cannot_be_read_is_refused_with_the_reason(data: bytes, says: str, newer: bool) -> None:
    with pytest.raises(WireError) as info:
        decode_event(data)
    assert says in str(info.value) and info.value.newer is newer


def test_a_command_needs_its_ids() -> None:
    with pytest.raises(WireError, match="command_id"):
        decode_command(dumps({"execution_id": "x", "step": "s", "step_run_id": "r"}))
    cmd = {"command_id": "c", "execution_id": "x", "step": "s", "step_run_id": "r"}
    assert decode_command(dumps(cmd)) == cmd
