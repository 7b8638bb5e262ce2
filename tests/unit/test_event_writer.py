"""The one event writer (``noetl.events.writer``): the bytes it sizes are the bytes it sends."""

from __future__ import annotations

from typing import Any

from noetl.events.envelope import Event, dumps, make_event
from noetl.events.writer import EventWriter, PayloadLimit, encode, payload_size


class Recorder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, str, bool]] = []
        self.confirmed = 0

    async def send(self, subject: str, data: bytes, msg_id: str, *, ack: bool = False) -> None:
        self.sent.append((subject, data, msg_id, ack))

    async def confirm(self) -> None:
        self.confirmed += 1


def event(payload: dict[str, Any]) -> Event:
    return make_event(
        event_id="e1",
        execution_id="x1",
        timestamp="t",
        source="worker",
        name="step.done",
        entity_type="step",
        entity_id="s",
        status="success",
        payload=payload,
        step_run_id="r1",
        trace_id="other",
    )


def test_payload_size_is_exactly_the_payloads_own_encoding() -> None:
    for payload in ({}, {"a": 1}, {"result": "é" * 1000, "nested": {"k": [1, 2, None]}}):
        ev = event(payload)
        assert payload_size(ev, dumps(ev)) == len(dumps(payload))


def test_encode_sends_the_event_bytes_under_the_limit_and_the_replacement_over_it() -> None:
    ev = event({"result": "x" * 100})
    out = encode(ev, 3)
    assert out == ("noetl.events.3.x1.step.done", dumps(ev), "e1")
    n = len(dumps(ev["payload"]))

    def failed(e: Event, n_bytes: int) -> Event:
        twin = e.copy()
        twin["name"], twin["payload"] = "step.failed", {"size": n_bytes}
        return twin

    # at the limit the payload fits, though the whole event is larger than it
    assert encode(ev, 3, PayloadLimit(n, failed)).data == dumps(ev)
    over = encode(ev, 3, PayloadLimit(n - 1, failed))
    assert over.subject == "noetl.events.3.x1.step.failed" and over.msg_id == "e1"
    assert over.data == dumps(failed(ev, n))


async def test_the_writer_gives_every_event_its_correlation_fields() -> None:
    outbox = Recorder()
    writer = EventWriter(
        outbox, source="worker", execution_id="x1", partition=2, step_run_id="r1", trace_id="x1"
    )
    ev = writer.build(
        event_id="e2", name="task.started", entity_type="task", entity_id="t", status="in_progress",
        payload={"task": "t"}, task_run_id="tr",
    )
    assert ev["step_run_id"] == "r1" and ev["task_run_id"] == "tr" and "trace_id" not in ev
    await writer.send(ev, ack=True)
    await writer.confirm()
    assert outbox.sent == [("noetl.events.2.x1.task.started", dumps(ev), "e2", True)]
    assert outbox.confirmed == 1
