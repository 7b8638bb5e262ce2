"""`noetl graph --execution` and `noetl test DIR` against real executions (real nats-server)."""

from __future__ import annotations

import argparse
import json
import textwrap
import uuid
from pathlib import Path

from noetl.cli.analysis_run import graph
from noetl.cli.suite import run_suite
from noetl.server.client import run_and_wait
from tests.service.test_replay import ROUTE


async def test_graph_of_an_execution(nc, nats_server, services, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    out = await run_and_wait(nc, {"request_id": uuid.uuid4().hex, "playbook": ROUTE}, timeout=30)
    f = tmp_path / "route.yaml"
    f.write_text(ROUTE)
    ns = argparse.Namespace(
        file=str(f), execution=out["execution_id"], events=None, nats_url=nats_server.url, out=None
    )
    assert await graph(ns) == 0
    text = capsys.readouterr().out
    assert text.startswith("flowchart TD\n")
    assert 's1["<b>measure</b><br/>1 task<br/>done ' in text and "<b>big</b><br/>1 task<br/>not run" in text
    assert 's1 -->|"event.result #gt; 10"| s2' in text and 's1 -->|"fired 1x"| s3' in text
    assert "class s2 notrun" in text and "linkStyle 1,3 stroke:#2e7d32" in text
    # the same from a `noetl run --json` file
    (tmp_path / "run.json").write_text(json.dumps(out))
    ns.execution, ns.events = None, str(tmp_path / "run.json")
    assert await graph(ns) == 0 and capsys.readouterr().out == text


def _case(d: Path, name: str, playbook: str, expect: str) -> None:
    (d / f"{name}.yaml").write_text(textwrap.dedent(playbook).lstrip())
    (d / f"{name}.expect.yaml").write_text(textwrap.dedent(expect).lstrip())


async def test_noetl_test_runs_cases_and_reports_coverage(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    _case(
        tmp_path,
        "route",
        ROUTE,
        """
        status: success
        result: small
        steps: {measure: [done], small: [done]}
        steps_absent: [big]
        """,
    )
    _case(
        tmp_path,
        "wrong",
        ROUTE,
        """
        payload: {n: 50}
        result: small
        """,
    )
    _case(
        tmp_path,
        "bad",
        ROUTE.replace("kind: python", "kind: teleport"),
        """
        invalid: true
        error_contains: [teleport]
        """,
    )
    (tmp_path / "lonely.yaml").write_text(ROUTE)  # no expectation: not a case
    ns = argparse.Namespace(
        dir=str(tmp_path), credentials=None, catalog=None, api_url=None, only=None, json=False, timeout=60.0
    )
    assert await run_suite(ns) == 1
    out = capsys.readouterr().out
    assert "PASS route\n" in out and "PASS bad\n" in out
    assert "FAIL wrong: result 'big', expected 'small'" in out
    expected = "  route: arcs 2/3, tasks 2/3\n    never fired: measure.next.arcs[0] → big\n"
    expected += "    never ran:   big.big_task"
    assert expected in out
    assert out.rstrip().endswith("test: 2 passed, 1 failed, 0 skipped")
    ns.only, ns.json = "route", True
    assert await run_suite(ns) == 0
    data = json.loads(capsys.readouterr().out.rsplit("test:", 1)[0])
    assert data[0]["coverage"]["arcs"]["never"] == [{"step": "measure", "arc": 0, "to": "big"}]
    ns.only = "nothing-matches"
    assert await run_suite(ns) == 2
