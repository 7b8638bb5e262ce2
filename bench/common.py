"""Helpers the engine scenarios share: submitting requests and timing their ``workflow.finished``."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime
from typing import Any

from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.envelope import dumps, loads
from noetl.events.nats_port import NatsBus


class FinishWatch:
    """One subscription to every ``workflow.finished``: execution id → arrival time and payload.

    One wildcard subscription instead of one per execution, so a thousand concurrent executions
    cost the client a dictionary lookup each rather than a thousand subscriptions.
    """

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.finished: dict[str, tuple[float, dict[str, Any]]] = {}
        self._waiters: dict[str, asyncio.Future[None]] = {}

    async def start(self) -> FinishWatch:
        async def on_msg(msg: Any) -> None:
            t = time.perf_counter()
            _, execution_id, _ = s.parse_event_subject(msg.subject)
            self.finished[execution_id] = (t, loads(msg.data).get("payload") or {})
            fut = self._waiters.pop(execution_id, None)
            if fut is not None and not fut.done():
                fut.set_result(None)

        self.sub = await self.nc.subscribe("noetl.events.*.*.workflow.finished", cb=on_msg)
        return self

    def expect(self, execution_id: str) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future()
        if execution_id in self.finished:
            fut.set_result(None)
        else:
            self._waiters[execution_id] = fut
        return fut

    def succeeded(self, execution_id: str) -> float:
        """When the execution's ``workflow.finished`` arrived; raises unless it succeeded, so no
        figure is ever taken from a run that failed (a rejected request finishes in microseconds)."""
        t, payload = self.finished[execution_id]
        status = payload.get("status")
        if status != "success":
            raise RuntimeError(f"execution {execution_id} ended {status}: {payload.get('error')}")
        return t

    async def stop(self) -> None:
        await self.sub.unsubscribe()


def new_request(playbook: str, payload: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"request_id": uuid.uuid4().hex, "playbook": playbook, "payload": payload or {}}


async def submit(js: Any, request: dict[str, Any]) -> Any:
    """Publish a request without waiting for its ack: returns the ack future."""
    return await js.publish_async(
        s.REQUEST_SUBJECT, dumps(request), headers={"Nats-Msg-Id": request["request_id"]}
    )


async def run_timed(
    nc: Any, watch: FinishWatch, request: dict[str, Any], timeout: float
) -> tuple[float, Any]:
    """``run_and_wait`` (the client every user has) with the time to ``workflow.finished``.

    The time stops when the finish event arrives, not when ``run_and_wait`` has also read the
    whole event log back, which is the client's cost rather than the engine's.
    """
    from noetl.events.ids import execution_id_for

    eid = execution_id_for(request["request_id"])
    done = watch.expect(eid)
    t0 = time.perf_counter()
    out = await run_and_wait(NatsBus(nc), request, timeout=timeout)
    await done
    t_end = watch.succeeded(eid)
    if out["status"] != "success":
        CLIENT_MISMATCHES.append(f"{eid}: run_and_wait said {out['status']!r}")
    return t_end - t0, out


# executions that finished successfully (their workflow.finished says so) but whose
# run_and_wait output said otherwise: the client read the log before the last events were in it
CLIENT_MISMATCHES: list[str] = []


def note_client_mismatches(rec: Any, scenario: str) -> None:
    if CLIENT_MISMATCHES:
        rec.note(
            scenario,
            f"{len(CLIENT_MISMATCHES)} execution(s) finished with success but run_and_wait returned "
            f"another status (it read the event log before the last events were stored), e.g. "
            f"{CLIENT_MISMATCHES[0]}",
        )
        CLIENT_MISMATCHES.clear()


def ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"]).timestamp()
