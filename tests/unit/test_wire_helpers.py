"""Small helpers on the wire path: timestamps and JetStream delivery metadata."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from nats.aio.msg import Msg

from noetl.events.clock import utc_now
from noetl.events.puller import delivered, stream_sequence


def test_utc_now_is_rfc3339_utc_and_current() -> None:
    before = datetime.now(UTC)
    stamps = [utc_now() for _ in range(1000)]
    after = datetime.now(UTC)
    parsed = [datetime.fromisoformat(t) for t in stamps]
    assert all(t.endswith("+00:00") and len(t) == 32 for t in stamps)
    assert all(before - timedelta(microseconds=1) <= p <= after for p in parsed)
    assert parsed == sorted(parsed)


def test_utc_now_crosses_a_second_boundary() -> None:
    first = datetime.fromisoformat(utc_now())
    time.sleep(1.01)
    assert datetime.fromisoformat(utc_now()) - first >= timedelta(seconds=1)


def _msg(reply: str) -> Msg:
    return Msg(_client=None, subject="noetl.commands.default", reply=reply)  # type: ignore[arg-type]


def test_delivery_metadata_agrees_with_nats_py_for_both_ack_subject_forms() -> None:
    v1 = "$JS.ACK.NOETL_COMMANDS.noetl-worker-default.3.1234.17.1732420000000000000.5"
    v2 = "$JS.ACK.hub.ACCHASH.NOETL_COMMANDS.noetl-worker-default.2.98765.40.1732420000000000000.0.rnd"
    for reply in (v1, v2):
        m = _msg(reply)
        assert delivered(m) == m.metadata.num_delivered
        assert stream_sequence(m) == m.metadata.sequence.stream
    assert (delivered(_msg(v1)), stream_sequence(_msg(v1))) == (3, 1234)
    assert (delivered(_msg(v2)), stream_sequence(_msg(v2))) == (2, 98765)
