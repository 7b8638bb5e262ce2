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

from noetl.dsl.errors import DeploymentError, NatsUnreachableError, NatsUnsuitableError
from noetl.events.port import BusError

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0


async def cli_connect(url: str, name: str, timeout: float = 5.0) -> Any:
    """A connection for one command, or ``NatsUnreachableError`` with the cause (the URL without its
    credentials); a nats-server without JetStream is ``NatsUnsuitableError``, one line too."""
    from noetl.events.bus import connect
    from noetl.events.connection import ConnectionState, check_jetstream, redact_urls
    from noetl.events.nats_port import translating

    state = ConnectionState(redact_urls(url))
    try:
        with translating():  # nats-py's failures as the port's (``BusError``)
            nc = await asyncio.wait_for(
                connect(
                    url, name=name, state=state, max_reconnect_attempts=2, connect_timeout=min(timeout, 5.0)
                ),
                timeout,
            )
    except (TimeoutError, OSError, BusError) as e:
        raise unreachable(state, e.__cause__ if isinstance(e, BusError) and e.__cause__ else e) from e
    from noetl.cli.as_principal import principal_token

    if principal_token():
        # as a principal the CLI goes through the NATS service, whose server checked JetStream;
        # a principal's NATS user may not ask JetStream itself (docs/security.md#nats)
        return nc
    try:
        await check_jetstream(nc, name.removeprefix("noetl-"), timeout=min(timeout, 5.0))
    except DeploymentError as e:
        await nc.close()
        raise NatsUnsuitableError(e.message) from None
    return nc


def unreachable(state: Any, cause: BaseException) -> NatsUnreachableError:
    """The one line that says which NATS could not be reached and why (its URL without
    credentials), and what to set."""
    from noetl.events.connection import describe

    why = state.last_error or state.scrub(describe(cause))
    return NatsUnreachableError(
        f"cannot reach NATS at {state.url} ({why}); is nats-server running there, and are the "
        "credentials right? Set --nats-url or NOETL_NATS_URL (NOETL_NATS_TOKEN, _USER/_PASSWORD, _CREDS)"
    )


def run_bounded(main: Callable[[], Awaitable[T]], what: str, timeout: float | None) -> T | int:
    """``asyncio.run(main())`` within ``timeout`` seconds (None: no bound, e.g. ``--follow``);
    expected failures become one line on stderr and exit code 1."""

    from noetl.events.nats_port import port_error

    async def bounded() -> T:
        return await (main() if timeout is None else asyncio.wait_for(main(), timeout))

    try:
        return asyncio.run(bounded())
    except (NatsUnreachableError, NatsUnsuitableError) as e:
        print(f"noetl {what}: {e}", file=sys.stderr)
    except TimeoutError:
        print(f"noetl {what}: no answer within --timeout {timeout:g} s", file=sys.stderr)
    except Exception as e:
        err = port_error(e)  # the port's error, or a command's own nats-py call (a principal's request)
        if err is None:
            raise
        said = err.__cause__ or err  # nats-py's own failure, as the adapter translated it
        if isinstance(said, TimeoutError):
            print(f"noetl {what}: no answer within --timeout {timeout:g} s", file=sys.stderr)
        else:
            print(f"noetl {what}: NATS said {type(said).__name__}: {said}", file=sys.stderr)
    return 1
