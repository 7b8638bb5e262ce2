"""``loop.in`` over a result that travelled by reference (SEMANTICS §11): the engine asks for the
value with ``loop.items.read`` and loops over it when the input comes back with the items the
adapter read; a rebuild from the log decides the same."""

from __future__ import annotations

from typing import Any

import pytest

from noetl.engine import fold
from noetl.events.envelope import Command, Event
from noetl.events.refs import make_reference
from tests.unit.engine.helpers import Driver, answer

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: t, path: t}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: each}]}
  - step: each
    loop:
      in: "{{ event.result }}"
      iterator: item
      spec: {mode: parallel, max_in_flight: 4, policy: {exec: EXEC}}
    tool: {kind: noop}
"""

REF = make_reference("e1/r1/result", b"[10, 20, 30]")


def _reached(exec_: str) -> Driver:
    """The loop step reached with a referenced result: it waits for its items."""
    d = Driver(PLAYBOOK.replace("EXEC", exec_))
    (cmd,) = d.take()
    d.feed(answer(cmd, result=REF))
    assert d.names()[-1] == "loop.items.read" and not d.commands
    return d


def _back(d: Driver, **attached: Any) -> Event:
    """The ``loop.items.read`` as the adapter hands it over: with what it read."""
    ev = next(e for e in d.log if e["name"] == "loop.items.read")
    assert ev["payload"] == {"ref": REF}
    return {**ev, "payload": {**ev["payload"], **attached}}


def _iterations(d: Driver, exec_: str) -> list[Any]:
    cmds = d.take()
    if exec_ == "distributed":
        while cmds:
            for c in cmds:
                d.feed(answer(c, result=c["iter"]["item"] + 1))
            cmds = d.take()
    else:
        (cmd,) = cmds
        assert cmd["local"]["items"] == REF  # the worker reads the same object: no second copy
        for i, item in enumerate([10, 20, 30]):
            one: Command = {**cmd, "command_id": f"{cmd['command_id']}-{i}", "index": i}
            d.feed(answer(one, result=item + 1))
    done = next(e for e in d.log if e["name"] == "loop.done")
    return list(done["payload"]["result"])


@pytest.mark.parametrize("exec_", ["distributed", "local"])
def test_loop_in_over_a_referenced_result_loops_over_its_items(exec_: str) -> None:
    d = _reached(exec_)
    d.feed(_back(d, items=[10, 20, 30]))
    assert _iterations(d, exec_) == [11, 21, 31]
    assert d.state.status == "success"
    # the stream holds loop.items.read once; a rebuild reads it with the items attached again
    log = [e for e in d.log if e["name"] != "loop.items.read" or "items" in e["payload"]]
    rebuilt = fold(log)
    assert rebuilt is not None and rebuilt.status == "success"
    assert rebuilt.runs.keys() == d.state.runs.keys()


@pytest.mark.parametrize("exec_", ["distributed", "local"])
def test_a_reference_to_a_non_list_fails_with_loop_in_not_list_naming_the_step(exec_: str) -> None:
    d = _reached(exec_)
    d.feed(_back(d, items={"a": 1}))
    assert d.state.status == "failed" and d.state.error is not None
    assert d.state.error["kind"] == "loop_in_not_list"
    assert "'each'" in d.state.error["message"] and "e1/r1/result" in d.state.error["message"]


def test_a_reference_that_cannot_be_read_fails_the_step_naming_it() -> None:
    d = _reached("distributed")
    d.feed(_back(d, read_error="object e1/r1/result is not in noetl_results"))
    assert d.state.error is not None and d.state.error["kind"] == "loop_in_not_list"
    assert "could not be read" in d.state.error["message"]


def test_the_attached_items_do_not_count_as_event_bytes() -> None:
    d = _reached("distributed")
    before = d.state.event_bytes
    d.feed(_back(d, items=list(range(10_000))))
    assert d.state.event_bytes - before < 10_000
