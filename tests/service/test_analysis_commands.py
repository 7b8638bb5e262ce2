"""`noetl graph --execution` and `noetl test DIR` against real executions (real nats-server)."""

from __future__ import annotations

import argparse
import json
import textwrap
import uuid
from pathlib import Path

import pytest

from noetl.cli.analysis_run import graph
from noetl.cli.suite import run_suite
from noetl.client.run import run_and_wait
from noetl.events.nats_port import NatsBus
from tests.service.test_replay import ROUTE


async def test_graph_of_an_execution(nc, nats_server, services, tmp_path: Path, capsys) -> None:
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ROUTE}, timeout=30)
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


async def test_noetl_test_runs_cases_and_reports_coverage(tmp_path: Path, capsys) -> None:
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


def _graph_args(file: Path | None, execution: str, url: str) -> argparse.Namespace:
    return argparse.Namespace(
        file=str(file) if file else None, execution=execution, events=None, nats_url=url, out=None
    )


async def test_graph_refuses_a_file_that_is_not_the_executions_playbook(
    nc, nats_server, services, tmp_path: Path, capsys
) -> None:
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ROUTE}, timeout=30)
    other = tmp_path / "other.yaml"
    other.write_text(ROUTE.replace("path: tests/route}", "path: tests/other, version: '2'}"))
    assert await graph(_graph_args(other, out["execution_id"], nats_server.url)) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip()
    assert "\n" not in error
    assert error.startswith(
        f"noetl graph: execution {out['execution_id']} ran another playbook (path tests/route, digest "
    )
    assert f"than {other} (path tests/other, version 2, digest " in error
    eid = out["execution_id"]
    assert f"omit FILE to draw the execution's own playbook (noetl graph --execution {eid})" in error
    # the same text, however named, is the same playbook
    same = tmp_path / "copy.yaml"
    same.write_text(ROUTE)
    assert await graph(_graph_args(same, out["execution_id"], nats_server.url)) == 0


async def test_graph_without_file_draws_the_catalog_playbook_the_execution_ran(
    nc, nats_server, services, tmp_path: Path, capsys
) -> None:
    from noetl.dsl.errors import CatalogConflictError
    from noetl.store.catalog import Catalog

    catalog = await Catalog.open(NatsBus(nc))
    text = ROUTE.replace("path: tests/route}", "path: tests/graph_catalog, version: '3'}")
    await catalog.register(text, "graph_catalog.yaml")
    request = {"request_id": uuid.uuid4().hex, "path": "tests/graph_catalog", "version": "3"}
    out = await run_and_wait(NatsBus(nc), request, timeout=30)
    assert out["status"] == "success"
    # a newer text registered under the same path later does not change what is drawn (under the
    # same version it is refused: a version is never replaced)
    newer = text.replace("result: big", "result: huge")
    with pytest.raises(CatalogConflictError):
        await catalog.register(newer, "graph_catalog.yaml")
    await catalog.register(newer.replace("version: '3'", "version: '4'"), "graph_catalog.yaml")
    assert await graph(_graph_args(None, out["execution_id"], nats_server.url)) == 0
    drawn = capsys.readouterr().out
    f = tmp_path / "route.yaml"
    f.write_text(text)
    assert await graph(_graph_args(f, out["execution_id"], nats_server.url)) == 0
    assert capsys.readouterr().out == drawn
    assert 's1 -->|"fired 1x"| s3' in drawn and "<b>big</b><br/>1 task<br/>not run" in drawn
    # an inline playbook's text is kept by its request event
    inline = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": ROUTE}, timeout=30)
    assert await graph(_graph_args(None, inline["execution_id"], nats_server.url)) == 0
    assert capsys.readouterr().out.startswith("flowchart TD\n")


async def test_graph_needs_a_file_or_an_execution(capsys) -> None:
    assert await graph(_graph_args(None, "", "nats://127.0.0.1:1")) == 2
    assert "give a playbook FILE, or --execution ID" in capsys.readouterr().err
