"""Which failures are waited out (a leader election) and which are the request's own."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest
from nats.js.errors import (
    APIError,
    BadRequestError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    NoStreamResponseError,
    NotFoundError,
    ServiceUnavailableError,
)

from noetl.events.retry import is_transient, retrying


@pytest.mark.parametrize(
    "error",
    [
        nats.errors.TimeoutError(),
        TimeoutError(),
        nats.errors.NoRespondersError(),
        nats.errors.ConnectionReconnectingError(),
        NoStreamResponseError(),
        ServiceUnavailableError(code=503),
        APIError(code=500, err_code=10008, description="JetStream system temporarily unavailable"),
        APIError(code=400, err_code=10009, description="JetStream cluster can not handle request"),
        # stored or being stored: a worker that treated it as a failure ran its tool again
        APIError(code=409, err_code=10158, description="duplicate message id is in process"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_election_failures_are_transient(error: Exception) -> None:
    assert is_transient(error)


@pytest.mark.parametrize(
    "error",
    [
        KeyNotFoundError(),
        KeyWrongLastSequenceError(),
        NotFoundError(code=404, err_code=10059, description="stream not found"),
        BadRequestError(code=400, err_code=10058, description="stream name already in use"),
        nats.errors.MaxPayloadError(),
        nats.errors.BadSubjectError(),
        ValueError("not JSON"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_the_requests_own_failures_are_not(error: Exception) -> None:
    assert not is_transient(error)


async def test_retrying_waits_out_transient_failures_and_passes_others() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise nats.errors.NoRespondersError
        return "stored"

    assert await retrying(flaky, "test", first_delay=0.001) == "stored" and calls == 3

    async def wrong() -> None:
        raise KeyWrongLastSequenceError

    with pytest.raises(KeyWrongLastSequenceError):
        await retrying(wrong, "test", first_delay=0.001)

    async def never() -> None:
        raise nats.errors.TimeoutError

    loop = asyncio.get_running_loop()
    with pytest.raises(nats.errors.TimeoutError):
        await retrying(never, "test", first_delay=0.01, deadline=loop.time() + 0.1)


@pytest.mark.parametrize(
    ("age", "size", "want"),
    [(None, None, (30 * 86400.0, -1)), ("12h", "1000000", (43200.0, 1_000_000)), ("0", "0", (0.0, -1))],
)
def test_event_log_retention_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, age: str | None, size: str | None, want: tuple[float, int]
) -> None:
    from noetl.events.streams import events_retention

    for name, value in (("NOETL_EVENTS_MAX_AGE", age), ("NOETL_EVENTS_MAX_BYTES", size)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert events_retention() == want


def test_a_retention_that_is_no_duration_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl.dsl.errors import DeploymentError
    from noetl.events.streams import events_retention

    monkeypatch.setenv("NOETL_EVENTS_MAX_AGE", "a month")
    with pytest.raises(DeploymentError, match="30d"):
        events_retention()
