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

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0


async def cli_connect(url: str, name: str, timeout: float = 5.0) -> Any:
    from noetl.events.bus import connect

    try:
        return await asyncio.wait_for(
            connect(url, name=name, max_reconnect_attempts=2, connect_timeout=min(timeout, 5.0)), timeout
        )
    except (TimeoutError, OSError, nats.errors.NoServersError) as e:
        raise Unreachable(url, e) from e


class Unreachable(Exception):
    def __init__(self, url: str, cause: BaseException) -> None:
        super().__init__(
            f"cannot reach NATS at {url} ({type(cause).__name__}{': ' + str(cause) if str(cause) else ''}); "
            "is nats-server running there? Set --nats-url or NOETL_NATS_URL"
        )


def run_bounded(main: Callable[[], Awaitable[T]], what: str, timeout: float | None) -> T | int:
    """``asyncio.run(main())`` within ``timeout`` seconds (None: no bound, e.g. ``--follow``);
    expected failures become one line on stderr and exit code 1."""

    async def bounded() -> T:
        return await (main() if timeout is None else asyncio.wait_for(main(), timeout))

    try:
        return asyncio.run(bounded())
    except Unreachable as e:
        print(f"noetl {what}: {e}", file=sys.stderr)
    except TimeoutError:
        print(f"noetl {what}: no answer within --timeout {timeout:g} s", file=sys.stderr)
    except nats.errors.Error as e:
        print(f"noetl {what}: NATS said {type(e).__name__}: {e}", file=sys.stderr)
    return 1
