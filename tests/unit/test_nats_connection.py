"""What the connection log and /health may say: where NATS is, never who connects (issue 25)."""

from __future__ import annotations

import logging

import pytest

from noetl.events.connection import (
    ConnectionLog,
    ConnectionState,
    parse_version,
    redact_url,
    redact_urls,
    secrets_of,
)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("nats://s3cr3t-token@n1:4222", "nats://***@n1:4222"),
        ("tls://user:pa55@n1.example:4222", "tls://***@n1.example:4222"),
        ("nats://user:p@ss@word@n1:4222", "nats://***@n1:4222"),  # the last @ ends the user part
        (" nats://n1:4222 ", "nats://n1:4222"),
    ],
)
def test_a_url_keeps_where_and_loses_who(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_cluster_list_is_redacted_url_by_url() -> None:
    got = redact_urls("nats://a:tok1@n1:4222,nats://n2:4222, nats://tok2@n3:4222")
    assert got == "nats://***@n1:4222,nats://n2:4222,nats://***@n3:4222"
    assert "tok1" not in got and "tok2" not in got


def test_every_secret_is_scrubbed_from_what_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    urls = ["nats://alice:url-pass-1@n1:4222"]
    state = ConnectionState(redact_urls(urls), secrets=secrets_of(urls, {"token": "opt-token-2"}))
    report = ConnectionLog(state, "noetl-test")
    with caplog.at_level(logging.DEBUG, logger="noetl.nats"):
        report.failed(OSError("refused by n1 for alice:url-pass-1 with opt-token-2"))
    text = caplog.text + repr(state.to_dict())
    for secret in ("url-pass-1", "opt-token-2", "alice"):
        assert secret not in text
    assert "nats://***@n1:4222" in caplog.text and "refused" in caplog.text


def test_a_repeated_cause_is_logged_at_a_back_off_and_a_new_one_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    report = ConnectionLog(ConnectionState("nats://n1:4222"), "noetl-test")
    with caplog.at_level(logging.WARNING, logger="noetl.nats"):
        for _ in range(20):
            report.failed(ConnectionRefusedError("refused"))
        report.failed(TimeoutError("timed out"))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines  # the first of the streak, then the change of cause
    assert "1 failed attempt since" in lines[0] and "21 failed attempts" in lines[1]
    assert report.state.failures == 21 and report.state.last_error == "TimeoutError: timed out"


def test_reconnects_round_robin_and_back_off() -> None:
    class S:
        def __init__(self, name: str, reconnects: int) -> None:
            self.name, self.reconnects = name, reconnects

    report = ConnectionLog(ConnectionState("nats://n1:4222"), "noetl-test")
    servers = [S("n1", 3), S("n2", 1), S("n3", 2)]
    chosen, delay = report.next_server(servers, {})
    assert chosen.name == "n2" and delay == 0.0  # first attempt at once, least-tried server
    for _ in range(30):
        report.failed(ConnectionRefusedError("refused"))
    _, delay = report.next_server(servers, {})
    assert 3.0 <= delay <= 5.0


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("2.11.10", (2, 11, 10)),
        ("v2.12.0-beta.1", (2, 12, 0)),
        ("2.15", (2, 15, 0)),
        ("x", None),
        (None, None),
    ],
)
def test_server_versions_parse(text: str | None, version: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == version


def test_a_reconnect_to_an_older_node_is_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """Checked at start; a reconnect may land on another node of a mixed cluster."""

    class Client:
        connected_url = None

        def __init__(self, version: str) -> None:
            self._server_info = {"version": version}

    report = ConnectionLog(ConnectionState("nats://n1:4222"), "noetl-test")
    with caplog.at_level(logging.INFO, logger="noetl.nats"):
        report.up(Client("2.15.1"))
        report.up(Client("2.15.1"))
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        report.up(Client("2.11.10"))
    (err,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert "nats-server 2.11.10" in err and "2.14.0" in err
