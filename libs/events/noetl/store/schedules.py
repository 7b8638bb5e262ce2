"""Schedules (SEMANTICS §18): a catalog playbook started on a cron expression in a time zone.

A schedule lives in two places in JetStream and nowhere else: its settings in the KV bucket
``noetl_schedules`` (key = name) and its cron definition in ``NOETL_TIMERS`` on
``noetl.timers.cron.<name>``, a JetStream message schedule (nats-server >= 2.14 for cron) that
NATS itself fires on ``noetl.timers.fire.<name>``. Fires roll up on that subject (one waits at
most), so a deployment whose servers were all down catches up at most one missed fire. The server
turns a fire into an execution request (``noetl.server.schedules``).

Cron expressions are parsed by ``croniter`` (never by hand): 5 fields (minute hour day-of-month
month day-of-week) or 6 with seconds first, as NATS takes them.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from noetl.dsl.errors import ForbiddenError, NoSuchEntityError, RequestInvalidError, reply_error
from noetl.dsl.names import schedule_name_problem
from noetl.events import subjects as s
from noetl.events.port import Bus, BusRefusedError, KeyValue
from noetl.store.principals import Principal, namespace_of

OVERLAP = ("skip", "allow")


def nats_cron(expr: str) -> str:
    """The 6-field form (seconds first) NATS schedules take."""
    fields = expr.split()
    return " ".join(["0", *fields]) if len(fields) == 5 else " ".join(fields)


def cron_problem(expr: object) -> str | None:
    if not isinstance(expr, str) or len(expr.split()) not in (5, 6):
        return (
            f"cron {expr!r}: give 5 fields (minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5') "
            "or 6 with seconds first (e.g. '*/10 * * * * *')"
        )
    from croniter import croniter  # ~10 ms: imported by the processes that handle a schedule

    if not croniter.is_valid(nats_cron(expr), second_at_beginning=True):
        return (
            f"cron {expr!r} is not a valid cron expression (see `man 5 crontab`; 6 fields put seconds first)"
        )
    return None


def zone(name: str | None) -> ZoneInfo | None:
    if not name:
        return None
    return ZoneInfo(name)


def timezone_problem(name: object) -> str | None:
    if name is None:
        return None
    try:
        zone(str(name))
    except (ZoneInfoNotFoundError, ValueError):
        return (
            f"time zone {name!r} is not known: give an IANA name such as UTC, Europe/Paris or "
            "America/New_York"
        )
    return None


def next_fire(schedule: dict[str, Any], after: datetime | None = None) -> datetime:
    from croniter import croniter

    tz = zone(schedule.get("timezone")) or UTC
    start = (after or datetime.now(UTC)).astimezone(tz)
    it = croniter(nats_cron(schedule["cron"]), start, second_at_beginning=True)
    return it.get_next(datetime)


def fire_time(schedule: dict[str, Any], next_header: str | None, stamped: datetime) -> datetime:
    """The due time a fire stands for: the one before the next fire NATS names in its
    ``Nats-Schedule-Next`` header, else the fire's own stamp to the second. The same for every
    replica that handles it, so the request id derived from it is too."""
    from croniter import croniter

    tz = zone(schedule.get("timezone")) or UTC
    expr = nats_cron(schedule["cron"])
    if next_header:
        try:
            nxt = datetime.fromisoformat(next_header.replace("Z", "+00:00")).astimezone(tz)
            return croniter(expr, nxt, second_at_beginning=True).get_prev(datetime).astimezone(UTC)
        except ValueError:
            pass
    return stamped.astimezone(UTC).replace(microsecond=0)


def _denied(principal: Principal | None, path: Any, doing: str) -> dict[str, Any] | None:
    """The ``forbidden`` reply when ``principal`` may not write the namespace of ``path``."""
    namespace = namespace_of(path if isinstance(path, str) else None)
    if principal is None or principal.may("write", namespace):
        return None
    return reply_error(ForbiddenError(
        f"principal {principal.name!r} ({principal.role}) may not {doing} namespace {namespace!r}"
    ))


class ScheduleStore:
    def __init__(self, bus: Bus, kv: KeyValue) -> None:
        self.bus, self.kv = bus, kv

    @classmethod
    async def open(cls, bus: Bus) -> ScheduleStore:
        return cls(bus, await bus.kv(s.SCHEDULES_BUCKET))

    async def get(self, name: str) -> dict[str, Any] | None:
        if schedule_name_problem(name):
            return None
        entry = await self.kv.get(name)
        return json.loads(entry.value) if entry is not None and entry.value else None

    async def list(self) -> list[dict[str, Any]]:
        out = []
        for name in await self.kv.keys():
            sch = await self.get(name)
            if sch is not None:
                sch["next_fire"] = None if sch.get("paused") else next_fire(sch).isoformat()
                out.append(sch)
        return out

    async def add_request(
        self, name: str, body: dict[str, Any], principal: Principal | None = None
    ) -> dict[str, Any]:
        """``add`` from an API request's JSON body: the HTTP API and the NATS service take the same
        fields (docs/api.md), and both name the caller (``principal``). A schedule whose playbook
        is not in the catalog could only fail, at every fire: it is refused here."""
        path, version = body.get("path"), body.get("version")
        old = await self.get(name) if not schedule_name_problem(name) else None
        if old and (denied := _denied(principal, old.get("path"), "replace the schedule of")):
            return denied  # before anything about the new playbook is told
        if isinstance(path, str) and path and not _denied(principal, path, "add schedules for"):
            from noetl.store.catalog import Catalog

            catalog = Catalog(await self.bus.kv(s.CATALOG_BUCKET), self.bus)
            if await catalog.entry(path, None if version is None else str(version)) is None:
                which = f"{path!r}" + (f" version {version}" if version is not None else "")
                return reply_error(RequestInvalidError(
                    f"no playbook {which} in the catalog: a schedule of it could only fail; register it "
                    "first (noetl catalog register FILE)"
                ))
        return await self.add(
            name,
            principal=principal,
            path=body.get("path"),
            version=body.get("version"),
            cron=body.get("cron"),
            timezone=body.get("timezone"),
            payload=body.get("payload"),
            overlap=body.get("overlap") or "allow",
        )

    async def add(
        self,
        name: str,
        *,
        path: Any,
        cron: Any,
        version: Any = None,
        timezone: Any = None,
        payload: Any = None,
        overlap: Any = "allow",
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """Create or replace a schedule; a bad field is refused with what to write instead.
        With ``principal`` it must be one that may write the namespace of ``path`` and, when it
        replaces a schedule, that of the schedule it replaces (``forbidden`` otherwise)."""
        for problem in (
            schedule_name_problem(name),
            None
            if isinstance(path, str) and path
            else "a schedule needs --path, the catalog path of a playbook",
            cron_problem(cron),
            timezone_problem(timezone),
            None if payload is None or isinstance(payload, dict) else "--payload must be a JSON object",
            None if overlap in OVERLAP else f"--overlap is skip or allow, found {overlap!r}",
        ):
            if problem:
                return reply_error(RequestInvalidError(problem))
        old = await self.get(name) or {}
        if denied := _denied(principal, path, "add schedules for") or (
            _denied(principal, old.get("path"), "replace the schedule of") if old else None
        ):
            return denied
        sch = {
            "name": name,
            "path": path,
            "version": None if version is None else str(version),
            "cron": cron,
            "timezone": timezone,
            "payload": payload or {},
            "overlap": overlap,
            "paused": False,
            "last_fire": old.get("last_fire"),
            "last_execution_id": old.get("last_execution_id"),
            "skipped": int(old.get("skipped") or 0),
            "last_skipped": old.get("last_skipped"),
            "principal": principal.name if principal is not None else old.get("principal"),
        }
        try:
            await self._define(sch)
        except BusRefusedError as e:
            return reply_error(
                RequestInvalidError(
                    f"NATS refused schedule {name!r} ({e}): cron and time zones need "
                    "nats-server 2.14 or later; check the expression"
                )
            )
        await self.kv.put(name, json.dumps(sch).encode())
        return sch

    async def _define(self, sch: dict[str, Any]) -> None:
        headers = {
            "Nats-Schedule": nats_cron(sch["cron"]),
            "Nats-Schedule-Target": s.schedule_fire_subject(sch["name"]),
            "Nats-Schedule-Rollup": "sub",  # one fire waits at most: a single catch-up
        }
        if sch.get("timezone"):
            headers["Nats-Schedule-Time-Zone"] = sch["timezone"]
        body = json.dumps({"name": sch["name"]}).encode()
        await self.bus.publish(s.schedule_subject(sch["name"]), body, headers=headers)

    async def _undefine(self, name: str) -> None:
        for subject in (s.schedule_subject(name), s.schedule_fire_subject(name)):
            await self.bus.purge(s.TIMERS_STREAM, subject)

    async def set_paused(self, name: str, paused: bool, principal: Principal | None = None) -> dict[str, Any]:
        if problem := schedule_name_problem(name):
            return reply_error(RequestInvalidError(problem))
        sch = await self.get(name)
        if sch is None:
            return reply_error(NoSuchEntityError(f"no schedule {name!r}: see `noetl schedule list`"))
        if denied := _denied(principal, sch.get("path"), "pause or resume the schedule of"):
            return denied
        sch["paused"] = paused
        await self.kv.put(name, json.dumps(sch).encode())
        if paused:
            await self._undefine(name)
        else:
            await self._define(sch)
        return sch

    async def record(self, name: str, fired: str, execution_id: str | None, skipped: bool = False) -> None:
        """After a fire: what it started (``--overlap skip`` looks at it next time), or that it was
        skipped: ``skipped`` counts the due times that started nothing and ``last_skipped`` names
        the latest, so ``noetl schedule list`` shows an overlap without reading server logs. A
        fire handled twice (redelivered after a failover) is counted once."""
        sch = await self.get(name)
        if sch is None:
            return
        sch["last_fire"] = fired
        if execution_id is not None:
            sch["last_execution_id"] = execution_id
        if skipped and sch.get("last_skipped") != fired:
            sch["skipped"] = int(sch.get("skipped") or 0) + 1
            sch["last_skipped"] = fired
        await self.kv.put(name, json.dumps(sch).encode())

    async def delete(self, name: str, principal: Principal | None = None) -> dict[str, Any]:
        if problem := schedule_name_problem(name):
            return reply_error(RequestInvalidError(problem))
        sch = await self.get(name)
        if sch is None:
            return reply_error(NoSuchEntityError(f"no schedule {name!r}: see `noetl schedule list`"))
        if denied := _denied(principal, sch.get("path"), "delete the schedule of"):
            return denied
        await self._undefine(name)
        await self.kv.delete(name)
        return {"name": name, "deleted": True}
