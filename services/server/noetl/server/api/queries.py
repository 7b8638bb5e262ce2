"""Answers about executions read from the event log alone, shared by HTTP, the NATS service and the CLI.

The server keeps nothing an answer could come from that the stream cannot give back (a replica
that never saw an execution must answer the same), so every answer here is a read of
``NOETL_EVENTS``; cancellation is a publish to the durable requests stream, so it survives a
server restart between the request and its handling. Every read goes through the bus port, so
the answers are the same over NATS and over the in-memory twin.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from noetl.client.activity import read_activity, task_outputs
from noetl.client.projection import waits_of
from noetl.client.stalls import assess
from noetl.client.view import output_of, waiting_for
from noetl.dsl.cache import parse_playbook
from noetl.dsl.errors import RequestInvalidError, brief, reply_error
from noetl.events import subjects as s
from noetl.events.batches import events_of
from noetl.events.bus import read_execution_events
from noetl.events.envelope import loads
from noetl.events.port import Bus
from noetl.events.runtime import list_runtime
from noetl.store.principals import Principal, namespace_of

REQUESTED_FILTER = s.events_named("playbook.execution.requested")
FINISHED_FILTER = s.events_named("workflow.finished")
# the events after which a running execution may wait for something outside it (SEMANTICS §17)
OUTSIDE_FILTERS = [s.events_named("step.waiting"), s.events_named("execution.paused")]
MAX_LIMIT = 1000
# what ``execution_status`` adds of the projection's view to the SEMANTICS §15 output
_VIEW_FIELDS = ("path", "version", "requested_at", "finished_at", "parent_execution_id", "schedule", "events")
_ID = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def valid_execution_id(execution_id: str) -> bool:
    """An id goes into subject filters: a dot or a wildcard in it would match other executions."""
    return bool(_ID.match(execution_id))


async def _read(bus: Bus, filters: list[str]) -> list[tuple[int, Any]]:
    """(seq, decoded event) of every event matching ``filters``, in stream order."""
    return [(m.seq, e) for m in await bus.read(s.EVENTS_STREAM, filters) for e in events_of(m.data)]


def _summary_of(requested: Mapping[str, Any] | None, finished: Mapping[str, Any] | None) -> dict[str, Any]:
    req = (requested or {}).get("payload") or {}
    fin = (finished or {}).get("payload") or {}
    any_ev = requested or finished or {}
    error = fin.get("error") or None
    return {
        "execution_id": any_ev.get("execution_id"),
        "path": req.get("path"),
        "version": req.get("version"),
        "playbook": (requested or {}).get("entity_id"),  # the path, or an inline playbook's name
        "status": fin.get("status", "running") if finished else "running",
        "requested_at": (requested or {}).get("timestamp"),
        "finished_at": (finished or {}).get("timestamp"),
        "parent_execution_id": any_ev.get("parent_execution_id"),
        "schedule": req.get("schedule"),  # the schedule whose fire started it (SEMANTICS §18)
        "namespace": namespace_of_request(req),
        "principal": (req.get("principal") or {}).get("name"),  # who asked for it, when known
        # the execution a rerun forked (issue 31)
        "rerun_of": fork.get("from_execution_id") if isinstance(fork := req.get("fork"), dict) else None,
        "error": brief(error),
    }


def namespace_of_request(req: dict[str, Any]) -> str:
    """The namespace an execution belongs to: recorded with its request; for older records (and
    requests rejected before they were recorded) that of its path, else ``""``."""
    recorded = req.get("namespace")
    if isinstance(recorded, str):
        return recorded
    return namespace_of(req.get("path"))


async def execution_namespace(bus: Bus, execution_id: str) -> str | None:
    """The namespace of an execution (None when the log has no event of it): what a principal's
    right to read or act on it is checked against."""
    requested = s.execution_event_filter(execution_id, "playbook.execution.requested")
    msg = await bus.last(s.EVENTS_STREAM, requested)
    if msg is not None:
        return namespace_of_request(loads(msg.data).get("payload") or {})
    rejected = s.execution_event_filter(execution_id, "playbook.request.evaluated")
    evaluated = await bus.last(s.EVENTS_STREAM, rejected)
    if evaluated is not None:  # rejected before it was recorded: the namespace of the path it asked for
        return str((loads(evaluated.data).get("payload") or {}).get("namespace") or "")
    finished = await bus.last(s.EVENTS_STREAM, s.execution_event_filter(execution_id, "workflow.finished"))
    return "" if finished is not None else None


async def _waits(bus: Bus, items: list[dict[str, Any]]) -> None:
    """Fill in what each running execution of a listed page waits for (a signal, a resume).

    Only executions that ever waited or paused are read in full (one filtered read finds them), so
    a page of executions that never do costs one read more, not one per execution."""
    for item in items:
        item["waiting"], item["paused"] = [], False
    running = {item["execution_id"]: item for item in items if item["status"] == "running"}
    if not running:
        return
    outside = {ev.get("execution_id") for _, ev in await _read(bus, OUTSIDE_FILTERS)}
    gate = asyncio.Semaphore(8)

    async def one(item: dict[str, Any]) -> None:
        async with gate:
            waits = waiting_for(await read_execution_events(bus, item["execution_id"]))
        item["waiting"], item["paused"] = waits["signals"], waits["paused"]

    await asyncio.gather(*(one(item) for eid, item in running.items() if eid in outside))


SHORT_ID_MIN = 4


async def resolve_execution_id(bus: Bus, given: str) -> str | dict[str, Any]:
    """A full execution id from the start of one, as the console shows them (``9f3a1b2c3d4e…``):
    the id itself when it is whole or matches nothing (the caller says there is no such
    execution), the one id it starts, or ``{"error": ...}`` naming the candidates when several
    start with it."""
    prefix = given.strip().rstrip("…").rstrip(".")
    if len(prefix) >= 32 or len(prefix) < SHORT_ID_MIN or not valid_execution_id(prefix):
        return given
    seen: dict[str, None] = {}
    for _, ev in await _read(bus, [REQUESTED_FILTER, FINISHED_FILTER]):
        eid = ev.get("execution_id")
        if isinstance(eid, str) and eid.startswith(prefix):
            seen[eid] = None
    if len(seen) == 1:
        return next(iter(seen))
    if not seen:
        return given
    shown = ", ".join(list(seen)[:5]) + (" …" if len(seen) > 5 else "")
    return reply_error(
        RequestInvalidError(
            f"{given!r} is the start of {len(seen)} execution ids ({shown}): give more of the id"
        )
    )


def _path_matches(item_path: Any, wanted: str) -> bool:
    """The path itself, or any path under it as a prefix: `etl/` finds `etl/daily` and `etl/hourly`
    (a person types the start of a path, as in Kestra's or Argo's search)."""
    return isinstance(item_path, str) and item_path.startswith(wanted)


async def list_executions(
    bus: Bus,
    *,
    status: str | None = None,
    path: str | None = None,
    limit: int = 100,
    before: int | None = None,
    visible: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Newest first. ``before`` is the cursor of the previous page (a stream sequence).

    A request rejected before it was recorded has a ``workflow.finished`` but no
    ``playbook.execution.requested``: it is listed too, as failed with no path, because a client
    that sent it still wants to find out why it never ran.
    """
    limit = max(1, min(int(limit), MAX_LIMIT))
    requested = await _read(bus, [REQUESTED_FILTER])
    finished = await _read(bus, [FINISHED_FILTER])
    first_seq: dict[str, int] = {}
    req_by: dict[str, dict[str, Any]] = {}
    fin_by: dict[str, dict[str, Any]] = {}
    for seq, ev in requested:
        eid = ev.get("execution_id")
        if isinstance(eid, str) and eid not in req_by:
            req_by[eid], first_seq[eid] = ev, seq
    for seq, ev in finished:
        eid = ev.get("execution_id")
        if isinstance(eid, str) and eid not in fin_by:
            fin_by[eid] = ev
            first_seq.setdefault(eid, seq)
    items: list[dict[str, Any]] = []
    next_cursor = None
    for eid in sorted(first_seq, key=first_seq.__getitem__, reverse=True):
        seq = first_seq[eid]
        if before is not None and seq >= before:
            continue
        item = _summary_of(req_by.get(eid), fin_by.get(eid))
        if status and item["status"] != status:
            continue
        if path and not _path_matches(item["path"], path):
            continue
        if visible is not None and not visible(item["namespace"]):
            continue  # another namespace's: not the caller's to see
        if len(items) == limit:
            next_cursor = first_seq[items[-1]["execution_id"]]
            break
        items.append(item)
    await _waits(bus, items)
    await _stalls(bus, items, req_by)
    return {"executions": items, "next_cursor": next_cursor}


async def execution_status(bus: Bus, execution_id: str) -> dict[str, Any] | None:
    """Status, ctx, step runs and result, or None when the log has no event of this execution."""
    events = await read_execution_events(bus, execution_id)
    if not events:
        return None
    activity = read_activity(execution_id, events)  # one fold: every part below renders it
    view, waits = activity.projection.view, waits_of(activity.projection)
    out = output_of(view)
    out.update({key: getattr(view, key) for key in _VIEW_FIELDS})
    out["waiting"], out["paused"] = waits["signals"], waits["paused"]  # SEMANTICS §17
    out["loops"] = activity.loops()  # per loop step: total, done, failed, in flight of each run
    out["stalled"] = await stall_of(bus, events, waiting=bool(out["waiting"]), paused=out["paused"])
    return out


async def stall_of(
    bus: Bus, events: Sequence[Mapping[str, Any]], *, waiting: bool, paused: bool
) -> dict[str, Any] | None:
    """Whether an execution whose events are all read is stalled, and why (None when it is not)."""
    if not events or any(e.get("name") == "workflow.finished" for e in events):
        return None
    requested = next((e for e in events if e.get("name") == "playbook.execution.requested"), None)
    pools, workers = await _live(bus)
    return _assess(events[-1], requested, {"waiting": waiting, "paused": paused}, pools, workers)


async def execution_logs(
    bus: Bus, execution_id: str, step: str | None = None
) -> list[dict[str, Any]] | None:
    """What each task run printed or logged (masked, capped), in log order, with output that
    travelled by reference read back; None when the log has no event of this execution."""
    from noetl.events.objects import is_reference, resolve

    events = await read_execution_events(bus, execution_id)
    if not events:
        return None
    out = task_outputs(events, step)
    for entry in out:
        if is_reference(entry["output"]):
            try:
                entry["output"] = await resolve(bus, entry["output"])
            except Exception as e:  # removed by retention, or damaged: say so, keep the others
                entry["output"] = f"[output not readable from the object store: {type(e).__name__}]\n"
    return out


def stall_after() -> float:
    """``NOETL_STALL_AFTER_S``: seconds without an event before a running execution that waits for
    nothing declared is reported as stalled."""
    from noetl.events.settings import setting

    return float(setting("stall_after_s"))


async def _live(bus: Bus) -> tuple[set[str] | None, set[str] | None]:
    """Live worker pools and worker ids from the runtime registry; None when it cannot be read."""
    try:
        entries = await list_runtime(bus, "worker")
    except Exception:
        return None, None
    if not entries:  # no registry kept here (an embedded run): nothing can be said of pools
        return None, None
    return {str(e.get("pool")) for e in entries}, {str(e.get("id")) for e in entries}


def _pool_of(requested: Mapping[str, Any] | None, step: Any) -> str | None:
    """The pool of ``step`` in the playbook the execution was requested with."""
    from noetl.dsl.cache import parse_playbook
    from noetl.dsl.specmerge import effective_step_spec
    from noetl.events.subjects import DEFAULT_POOL

    text = ((requested or {}).get("payload") or {}).get("playbook")
    if not isinstance(text, str) or not isinstance(step, str):
        return None
    try:
        pb = parse_playbook(text, "<request>")
        return str(effective_step_spec(pb, pb.step(step)).get("pool") or DEFAULT_POOL)
    except Exception:
        return None


def _assess(
    last: Mapping[str, Any],
    requested: Mapping[str, Any] | None,
    item: dict[str, Any],
    pools: set[str] | None,
    workers: set[str] | None,
) -> dict[str, Any] | None:
    return assess(
        last,
        datetime.now(UTC),
        waiting=bool(item.get("waiting")),
        paused=bool(item.get("paused")),
        step_pool=_pool_of(requested, last.get("entity_id")),
        live_pools=pools,
        live_workers=workers,
        after_s=stall_after(),
    )


async def _stalls(
    bus: Bus, items: list[dict[str, Any]], requested: Mapping[str, Mapping[str, Any]] | None = None
) -> None:
    """Fill in ``stalled`` for the running executions of a page: one read of each one's last event,
    and of its request event only when it looks stalled and the caller has not read that already
    (the request names the step's pool: stalled or queued)."""
    running = [item for item in items if item["status"] == "running"]
    for item in items:
        item["stalled"] = None
    if not running:
        return
    pools, workers = await _live(bus)
    gate = asyncio.Semaphore(8)

    async def one(item: dict[str, Any]) -> None:
        eid = item["execution_id"]
        async with gate:
            with contextlib.suppress(Exception):
                msg = await bus.last(s.EVENTS_STREAM, s.execution_events_filter(eid))
                if msg is None:
                    return
                last = events_of(msg.data)[-1]  # a batch's last event
                if requested is not None:
                    item["stalled"] = _assess(last, requested.get(eid), item, pools, workers)
                elif _assess(last, None, item, pools, workers) is not None:
                    subject = s.execution_event_filter(eid, "playbook.execution.requested")
                    req = await bus.last(s.EVENTS_STREAM, subject)
                    item["stalled"] = _assess(last, loads(req.data) if req else None, item, pools, workers)

    await asyncio.gather(*(one(item) for item in running))


MAX_STALL_SCAN = 500  # running executions a metrics scrape looks at


async def stall_counts(bus: Bus, running: list[str]) -> dict[str, int]:
    """How many of the ``running`` executions are stalled or queued for a pool without workers
    (``/metrics``); at most ``MAX_STALL_SCAN`` are looked at per scrape."""
    items: list[dict[str, Any]] = [
        {"execution_id": eid, "status": "running"} for eid in running[:MAX_STALL_SCAN]
    ]
    if not items:
        return {}
    await _waits(bus, items)
    await _stalls(bus, items)
    counts: dict[str, int] = {}
    for item in items:
        if item["stalled"]:
            counts[item["stalled"]["state"]] = counts.get(item["stalled"]["state"], 0) + 1
    return counts


def request_status_code(reply: dict[str, Any]) -> int:
    """HTTP status for a ``RequestHandler.handle`` reply: the request's fault or the playbook's."""
    error = reply.get("error")
    if not error:
        return 202
    return {"playbook_invalid": 422, "forbidden": 403}.get(error.get("kind"), 400)


async def signal_refusal(
    bus: Bus, catalog: Any, execution_id: str, signal: str, principal: Principal
) -> str | None:
    """Why ``principal`` may not send ``signal`` to the execution, or None: a step that awaits it
    may name who answers (``lifecycle.await.by: {roles, namespaces}``), and a signal anyone in the
    namespace could send would make an approval no approval."""
    requested = s.execution_event_filter(execution_id, "playbook.execution.requested")
    msg = await bus.last(s.EVENTS_STREAM, requested)
    if msg is None:
        return None
    try:
        event = await catalog.with_playbook_text(loads(msg.data))
        playbook = parse_playbook(event["payload"]["playbook"], event["payload"].get("file") or "<playbook>")
    except Exception:
        return None
    for step in playbook.workflow:
        lc = step.lifecycle
        if lc is None or lc.await_signal != signal or not (lc.await_roles or lc.await_namespaces):
            continue
        role_ok = not lc.await_roles or principal.role in lc.await_roles
        space_ok = not lc.await_namespaces or any(principal.covers(ns) for ns in lc.await_namespaces)
        if not (role_ok and space_ok):
            who = [f"role {'/'.join(lc.await_roles)}"] if lc.await_roles else []
            who += [f"namespace {'/'.join(lc.await_namespaces)}"] if lc.await_namespaces else []
            return (
                f"step {step.name!r} awaits signal {signal!r} from {' in '.join(who)} only; principal "
                f"{principal.name!r} ({principal.role}) may not send it"
            )
    return None
