"""The NATS adapter translates nats-py's failures into the port's errors (issue 28): what passes
by itself becomes ``BusUnavailableError``, a message that can never be stored ``BusRefusedError``, a
missing stream ``NoStreamError``, anything else of nats-py a plain ``BusError``."""

from __future__ import annotations

import nats.errors
import pytest
from nats.js.errors import APIError, NotFoundError, ServiceUnavailableError

from noetl.events.nats_port import port_error
from noetl.events.port import BusError, BusRefusedError, BusUnavailableError, NoStreamError


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (nats.errors.TimeoutError(), BusUnavailableError),
        (TimeoutError(), BusUnavailableError),
        (nats.errors.NoRespondersError(), BusUnavailableError),
        (nats.errors.ConnectionReconnectingError(), BusUnavailableError),
        (ServiceUnavailableError(code=503, description="no leader", err_code=10008), BusUnavailableError),
        (APIError(code=500, description="cluster not available", err_code=10008), BusUnavailableError),
        (nats.errors.MaxPayloadError(), BusRefusedError),
        (APIError(code=400, description="message size exceeds maximum", err_code=10054), BusRefusedError),
        (NotFoundError(code=404, description="stream not found", err_code=10059), NoStreamError),
        (NotFoundError(code=404, description="consumer not found", err_code=10014), BusError),
        (nats.errors.ConnectionClosedError(), BusError),
    ],
)
def test_a_nats_error_becomes_the_ports(error: BaseException, kind: type[BusError]) -> None:
    got = port_error(error)
    assert type(got) is kind
    assert got.__cause__ is error  # the original stays readable in logs and tracebacks


def test_the_ports_own_errors_pass_and_other_errors_are_not_the_adapters() -> None:
    own = BusRefusedError("too large")
    assert port_error(own) is own
    assert port_error(ValueError("not a bus failure")) is None
