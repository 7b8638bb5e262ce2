"""Long-lived loops that never end while their process runs: ended ones are logged and restarted.

Every control loop of the server and the worker (request intake, timers, schedules, leases, a
worker's command pulls) is a task that is meant to run until the process stops. A task that
returns or raises early is a silent stall: nothing decides, nothing pulls, and probes still say
ready. Each such loop runs under ``supervise``, which logs the end with its cause at warning level,
counts it (``/metrics``), and starts the loop again after a back-off that grows while it keeps
failing quickly and resets once a run lasted.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from noetl.events.retry import Backoff, describe

log = logging.getLogger("noetl.supervise")

MIN_DELAY = 0.1
MAX_DELAY = 5.0
HEALTHY_AFTER = 30.0  # seconds: a run that lasted this long restarts the back-off from MIN_DELAY

# restarts per loop name in this process, read by /metrics
restarts: Counter[str] = Counter()


async def supervise(
    name: str,
    run: Callable[[], Awaitable[None]],
    stopping: asyncio.Event | Callable[[], bool],
) -> None:
    """Run ``run()`` again each time it ends until ``stopping`` is set (or returns true).

    A cancel ends the supervision (that is how a process stops a loop it no longer wants)."""
    done = stopping.is_set if isinstance(stopping, asyncio.Event) else stopping
    loop = asyncio.get_running_loop()
    backoff = Backoff(MIN_DELAY, MAX_DELAY, healthy_after=HEALTHY_AFTER)
    while not done():
        began = loop.time()
        try:
            await run()
            if done():
                return
            cause = "it returned"
        except asyncio.CancelledError:
            raise
        except Exception as e:
            if done():
                return
            cause = describe(e)
            log.warning("%s ended: %s; restarting", name, cause, exc_info=True)
        else:
            log.warning("%s ended: %s; restarting", name, cause)
        restarts[name] += 1
        await asyncio.sleep(backoff.next(loop.time() - began))


def start(
    name: str, run: Callable[[], Awaitable[None]], stopping: asyncio.Event | Callable[[], bool]
) -> asyncio.Task[None]:
    """``supervise`` as a named task."""
    return asyncio.create_task(supervise(name, run, stopping), name=name)


async def gather_settled(*steps: Awaitable[Any]) -> list[Any]:
    """Independent steps run together, each one ended before the first error (in their order) is
    raised: a caller that retries starts again from a settled state, and sees the error's own
    type, as it would have running them one after another."""
    outcomes = await asyncio.gather(*steps, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return outcomes
