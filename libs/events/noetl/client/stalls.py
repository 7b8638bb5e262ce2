"""Is a running execution stalled, and why: read from its last event and who is alive.

Every accepted execution should end; one that has had no event for a while and waits for nothing
it declared (a signal, a resume, a worker of a pool that has none) is a stall the operator must
see with the reason the log and the runtime registry can give, instead of a ``running`` that
never changes. Pure: the caller reads the last event, the clock and the live workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from noetl.events import vocabulary

# a running execution with no event for this long, waiting for nothing, is reported as stalled
DEFAULT_STALL_AFTER_S = 120.0

def _age(timestamp: Any, now: datetime) -> float | None:
    try:
        return (now - datetime.fromisoformat(str(timestamp))).total_seconds()
    except (TypeError, ValueError):
        return None


def assess(
    last: Mapping[str, Any] | None,
    now: datetime,
    *,
    waiting: bool = False,
    paused: bool = False,
    step_pool: str | None = None,
    live_pools: set[str] | None = None,
    live_workers: set[str] | None = None,
    after_s: float = DEFAULT_STALL_AFTER_S,
) -> dict[str, Any] | None:
    """``{state: stalled|queued, idle_s, last_event, reason}``, or None while the execution moves
    or waits for something declared. ``step_pool``: the pool of the step its last event is about;
    ``live_pools``/``live_workers``: from the runtime registry (None when unknown)."""
    if last is None or waiting or paused:
        return None
    idle = _age(last.get("timestamp"), now)
    if idle is None or idle < after_s:
        return None
    name = str(last.get("name"))
    step = last.get("entity_id")
    out: dict[str, Any] = {"state": "stalled", "idle_s": round(idle, 1), "last_event": name}
    payload = last.get("payload")
    worker = payload.get("worker") if isinstance(payload, Mapping) else None
    if step_pool is not None and live_pools is not None and step_pool not in live_pools and (
        name in ("step.scheduled", "loop.started", "step.started") or name.startswith("loop.")
    ):
        out["state"] = "queued"
        out["reason"] = (
            f"step {step!r} waits for a worker of pool {step_pool!r} and none is alive: "
            f"start one (noetl worker --pool {step_pool})"
        )
    # an input the server decides on (the engine's own groups): a stall after it is the control plane's
    elif name in vocabulary.OUTSIDE_INPUTS or (
        name in vocabulary.WORKER_TERMINAL_EVENTS and last.get("source") == "worker"
    ):
        out["reason"] = (
            f"its last event, {name}, is {idle:.0f} s old and no server has decided on it: check that "
            "a server holds its partition (noetl workers --all) and the servers' logs"
        )
    elif name == "task.started":
        if live_workers is not None and worker and worker not in live_workers:
            out["reason"] = (
                f"a task of step {step!r} started on worker {worker}, which is gone; its command is "
                "delivered again after the ack wait"
            )
        else:
            out["reason"] = (
                f"a task of step {step!r} has run for {idle:.0f} s on worker {worker or '?'} with no "
                "event since: a long task, or one that hangs (bound it with the step's timeout_s)"
            )
    elif name == "step.scheduled":
        out["reason"] = (
            f"step {step!r} was scheduled {idle:.0f} s ago and no worker has started it: check the "
            f"workers of pool {step_pool or '?'} (noetl workers) and NOETL_COMMANDS"
        )
    else:
        out["reason"] = f"no event for {idle:.0f} s; its last event is {name} (step {step!r})"
    return out
