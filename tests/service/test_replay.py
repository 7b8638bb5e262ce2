"""`noetl replay`: a recorded execution folded through the engine again, against its own playbook
(no divergence) and against a version with a changed arc (a divergence at the step whose arcs
changed). The execution runs on a real nats-server with a server and a worker."""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest

from noetl.cli.analysis_run import replay
from noetl.cli.replay_diff import render, replay_diff
from noetl.client.run import run_and_wait
from noetl.events.bus import read_execution_events
from noetl.events.nats_port import NatsBus

ROUTE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: route, path: tests/route}
workload: {n: 5}
workflow:
  - step: start
    next: {arcs: [{step: measure}]}
  - step: measure
    tool:
      - name: size
        kind: python
        args: {n: "{{ workload.n }}"}
        code: |
          def main(n):
              return n
    next:
      arcs:
        - step: big
          when: "{{ event.result > 10 }}"
        - step: small
  - step: big
    tool: {kind: noop, result: big}
  - step: small
    tool: {kind: noop, result: small}
"""


@pytest.fixture
async def recorded(nc, services):
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ROUTE}, timeout=30)
    assert out["status"] == "success" and out["result"] == "small"
    return out["execution_id"], await read_execution_events(NatsBus(nc), out["execution_id"])


async def test_replay_against_its_own_playbook_has_no_divergence(recorded) -> None:
    _, events = recorded
    report = replay_diff(events)
    assert report.divergences == []
    assert report.recorded == report.replayed > 5 and report.inputs >= 3
    assert "no divergence" in render(report, "x")


async def test_replay_after_a_changed_arc_points_at_the_step(recorded) -> None:
    _, events = recorded
    report = replay_diff(events, ROUTE.replace("event.result > 10", "event.result > 1"))
    first = report.divergences[0]
    assert first.cause["name"] == "step.done" and first.cause["entity_id"] == "measure"
    kinds = [(d.kind, d.recorded.get("name") if d.recorded else None) for d in first.diffs]
    assert kinds[0] == ("changed", "next.evaluated")
    nxt = first.diffs[0]
    assert nxt.recorded["payload"]["fired"] == [{"step": "small", "arc": 1, "args": {}}]
    assert nxt.replayed["payload"]["fired"] == [{"step": "big", "arc": 0, "args": {}}]
    assert ("changed", "step.scheduled") in kinds
    text = render(report, "new.yaml")
    assert "divergence 1 at input #2: step.done of step `measure`" in text
    assert "firing `small` (arc 1); replayed next.evaluated of `measure` firing `big` (arc 0)" in text


async def test_replay_command(recorded, nats_server, tmp_path: Path, capsys) -> None:
    execution_id, _ = recorded
    ns = argparse.Namespace(execution_id=execution_id, playbook=None, nats_url=nats_server.url, json=False)
    assert await replay(ns) == 0
    assert "no divergence" in capsys.readouterr().out
    changed = tmp_path / "new.yaml"
    changed.write_text(
        ROUTE.replace("- step: small\n    tool", "- step: small\n    spec: {}\n    tool").replace(
            "        - step: small\n", '        - step: big\n          when: "{{ true }}"\n'
        )
    )
    ns.playbook, ns.json = str(changed), True
    assert await replay(ns) == 1
    assert '"divergences"' in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(ROUTE.replace("kind: python", "kind: teleport"))
    ns.playbook = str(bad)
    assert await replay(ns) == 2
    ns.playbook, ns.execution_id = None, "no-such-execution"
    assert await replay(ns) == 2
