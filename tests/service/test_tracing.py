"""One execution's spans form one connected tree across server and worker (issue 30)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from noetl.client.run import run_and_wait
from noetl.events import tracing
from noetl.events.nats_port import NatsBus
from tests.support import running, until

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: traced, path: tests/traced}
workflow:
  - step: start
    next: {arcs: [{step: work}]}
  - step: work
    tool:
      - {name: first, kind: python, code: "def main():\\n    return 1"}
      - {name: second, kind: noop}
    next: {arcs: [{step: last}]}
  - step: last
    tool: [{name: third, kind: noop}]
"""


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    spans = InMemorySpanExporter()
    tracing.configure(spans, batch=False)
    try:
        yield spans
    finally:
        tracing.shutdown()


def _tree(spans: list[Any], execution_id: str) -> list[Any]:
    return [s for s in spans if (s.attributes or {}).get("noetl.execution_id") == execution_id]


async def test_one_execution_is_one_connected_trace(nc: Any, exporter: InMemorySpanExporter) -> None:
    async with running(NatsBus(nc)) as _:
        eid = (
            await run_and_wait(
                NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": PLAYBOOK}, timeout=30
            )
        )["execution_id"]

        async def rooted() -> list[Any]:
            mine = _tree(list(exporter.get_finished_spans()), eid)
            return mine if any(s.name.startswith("execution ") for s in mine) else []

        spans = await until(rooted, 10)
    names = [s.name for s in spans]
    assert {s.context.trace_id for s in spans} == {tracing.trace_int(eid)}, "one trace"
    roots = [s for s in spans if s.parent is None]
    assert [r.name for r in roots] == ["execution tests/traced"], names
    ids = {s.context.span_id for s in spans}
    orphans = [s.name for s in spans if s.parent is not None and s.parent.span_id not in ids]
    assert not orphans, f"spans whose parent is not in the trace: {orphans}"
    by_id = {s.context.span_id: s for s in spans}

    def parent_name(s: Any) -> str:
        return str(by_id[s.parent.span_id].name)

    assert names.count("request") == 1
    assert any(n.startswith("decide ") for n in names)
    commands = [s for s in spans if s.name.startswith("command ")]
    assert sorted(s.name for s in commands) == ["command last", "command work"], names  # start has no tool
    for c in commands:  # a worker's span hangs under the server's decision that scheduled it
        assert parent_name(c).startswith("decide "), parent_name(c)
    tasks = {s.name: s for s in spans if s.name.startswith("task ")}
    assert set(tasks) == {"task first", "task second", "task third"}, names
    assert parent_name(tasks["task first"]) == "command work"
    tools = [s for s in spans if s.name.startswith("tool ")]
    assert {parent_name(t) for t in tools} == set(tasks) and len(tools) == 3
    assert by_id[tracing.root_span(eid, eid)].attributes["noetl.status"] == "success"


def test_tracing_is_off_by_default_and_commands_carry_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure_from_env("noetl-test") is False and not tracing.enabled()
    with tracing.span("x", "t") as sp:
        assert sp is None
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.configure_from_env("noetl-test") is False


def test_a_w3c_trace_id_from_the_request_is_kept() -> None:
    w3c = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert tracing.trace_int(w3c) == int(w3c, 16)
    assert tracing.trace_int("exec-1") == tracing.trace_int("exec-1") != tracing.trace_int("exec-2")
    assert tracing.traceparent(w3c, 1) == f"00-{w3c}-0000000000000001-01"


def test_an_otlp_endpoint_turns_tracing_on_or_says_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import importlib.util

    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    monkeypatch.delenv("OTEL_SDK_DISABLED", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")
    try:
        on = tracing.configure_from_env("noetl-test")
        try:
            installed = importlib.util.find_spec("opentelemetry.exporter.otlp.proto.http") is not None
        except ModuleNotFoundError:
            installed = False
        if not installed:
            assert on is False and not tracing.enabled()
            assert "pip install 'noetl-jetstream[otlp]'" in caplog.text
        else:
            assert on is True and tracing.enabled()
    finally:
        tracing.shutdown()
    assert not tracing.enabled()
