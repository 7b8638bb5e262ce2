"""One-shot commands against NATS: bounded in time, and one line instead of a traceback when
NATS is out of reach or a call times out.

A service waits for NATS forever (it may start before its cluster); a command a person typed must
not: it connects with a short time-out, gives every call ``--timeout`` seconds (30 by default) and
says what went wrong in one line, exit code 1.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import nats.errors

from noetl.dsl.errors import DeploymentError

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0


async def cli_connect(url: str, name: str, timeout: float = 5.0) -> Any:
    """A connection for one command, or ``Unreachable`` with the cause (the URL without its
    credentials); a nats-server without JetStream is ``Unsuitable``, one line too."""
    from noetl.events.bus import connect
    from noetl.events.connection import ConnectionState, check_jetstream, redact_urls

    state = ConnectionState(redact_urls(url))
    try:
        nc = await asyncio.wait_for(
            connect(url, name=name, state=state, max_reconnect_attempts=2, connect_timeout=min(timeout, 5.0)),
            timeout,
        )
    except (TimeoutError, OSError, nats.errors.Error) as e:
        raise Unreachable(state, e) from e
    from noetl.cli.as_principal import principal_token

    if principal_token():
        # as a principal the CLI goes through the NATS service, whose server checked JetStream;
        # a principal's NATS user may not ask JetStream itself (docs/security.md#nats)
        return nc
    try:
        await check_jetstream(nc, name.removeprefix("noetl-"), timeout=min(timeout, 5.0))
    except DeploymentError as e:
        await nc.close()
        raise Unsuitable(e.message) from None
    return nc


class Unreachable(Exception):
    def __init__(self, state: Any, cause: BaseException) -> None:
        from noetl.events.connection import describe

        why = state.last_error or state.scrub(describe(cause))
        super().__init__(
            f"cannot reach NATS at {state.url} ({why}); is nats-server running there, and are the "
            "credentials right? Set --nats-url or NOETL_NATS_URL (NOETL_NATS_TOKEN, _USER/_PASSWORD, _CREDS)"
        )


class Unsuitable(Exception):
    """NATS answers but cannot serve NoETL (JetStream off)."""


def run_bounded(main: Callable[[], Awaitable[T]], what: str, timeout: float | None) -> T | int:
    """``asyncio.run(main())`` within ``timeout`` seconds (None: no bound, e.g. ``--follow``);
    expected failures become one line on stderr and exit code 1."""

    async def bounded() -> T:
        return await (main() if timeout is None else asyncio.wait_for(main(), timeout))

    try:
        return asyncio.run(bounded())
    except (Unreachable, Unsuitable) as e:
        print(f"noetl {what}: {e}", file=sys.stderr)
    except TimeoutError:
        print(f"noetl {what}: no answer within --timeout {timeout:g} s", file=sys.stderr)
    except nats.errors.Error as e:
        print(f"noetl {what}: NATS said {type(e).__name__}: {e}", file=sys.stderr)
    return 1
