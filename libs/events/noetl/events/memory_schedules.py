"""JetStream message scheduling (ADR-51) for the in-memory bus, as nats-server 2.14+ does it.

What nats-server 2.15 was seen to do (``tests/service/test_bus_schedules.py`` holds both buses to it):

- A definition is a message with ``Nats-Schedule``, stored in its stream like any other with
  ``Nats-Rollup: sub`` added: the last definition on a subject is the schedule, a new one replaces
  the old one, and a definition that is gone (purged, rolled up) never fires.
- At its due time the definition's body is stored on ``Nats-Schedule-Target`` (a subject of the same
  stream) with the definition's headers less ``Nats-Schedule*``, ``Nats-Expected-*``,
  ``Nats-Msg-Id``, ``Nats-TTL`` and ``Nats-Rollup``, plus ``Nats-Scheduler`` (the definition's
  subject) and ``Nats-Schedule-Next``: ``purge`` for ``@at`` (storing that fire removes the
  definition), for a repeating schedule the next due time in RFC 3339 to the second, in the
  schedule's time zone (``2026-11-25T00:25:16+01:00``; ``Z`` for UTC). ``Nats-Schedule-Rollup: sub``
  puts ``Nats-Rollup: sub`` on each fire, so one fire at most waits on the target.
- Due times missed (a server down) fire once, then the schedule skips ahead: never a backlog.
- Refused (400): a pattern other than ``@at <RFC 3339>``, ``@every <duration>`` of at least 1 s, a
  predefined ``@hourly``-like name or a 6-field cron with seconds first; a time zone NATS does not
  know or on anything but a cron; a target missing, with wildcards, equal to the definition's
  subject or outside the stream; ``Nats-Schedule-Rollup`` other than ``sub``; a ``Nats-Rollup`` of
  its own. ``Nats-Schedule-Source`` and ``Nats-Schedule-TTL`` are not modelled and refused here.

Due times read the bus's ``wall`` clock; the firing task sleeps in short steps so a test that moves
``wall`` sees its fires at once. ``close`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from noetl.events.port import BusRefusedError, Message

if TYPE_CHECKING:
    from noetl.events.memory import MemoryBus, _Stream

log = logging.getLogger("noetl.events")

_STEP = 0.05  # longest sleep between looks at the clock (seconds)
_UTC = ZoneInfo("UTC")
_PREDEFINED = {
    "@yearly": "0 0 0 1 1 *",
    "@annually": "0 0 0 1 1 *",
    "@monthly": "0 0 0 1 * *",
    "@weekly": "0 0 0 * * 0",
    "@daily": "0 0 0 * * *",
    "@midnight": "0 0 0 * * *",
    "@hourly": "0 0 * * * *",
}
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
# stripped from a definition's headers when its body is fired
_NOT_COPIED = ("Nats-Schedule", "Nats-Expected-", "Nats-Msg-Id", "Nats-TTL", "Nats-Rollup")


@dataclass(frozen=True)
class _Pattern:
    at: float | None = None  # @at: the one due time (epoch seconds)
    every: float | None = None  # @every: seconds between fires
    cron: str | None = None  # 6 fields, seconds first
    zone: ZoneInfo = _UTC

    @property
    def repeats(self) -> bool:
        return self.at is None

    def first(self, stamp: float) -> float:
        """The first due time of a definition stored at ``stamp``."""
        if self.at is not None:
            return self.at
        if self.every is not None:
            return round(stamp) + self.every
        return self._cron_after(stamp)

    def after(self, due: float, now: float) -> float:
        """The due time after ``due`` fired at ``now``: missed ones are skipped, as NATS does."""
        if self.every is not None:
            nxt = round(due) + self.every
            return nxt if nxt >= now else round(now) + self.every
        return self._cron_after(max(due, now))

    def _cron_after(self, t: float) -> float:
        if self.cron is None:
            raise ValueError("not a cron schedule")  # a pattern has one of at, every, cron
        start = datetime.fromtimestamp(t, self.zone)
        return float(croniter(self.cron, start, second_at_beginning=True).get_next(float))


def _go_duration(text: str) -> float | None:
    """Seconds of a Go ``time.ParseDuration`` text (unsigned), None when it is not one."""
    pos, total = 0, 0.0
    for m in _GO_DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    return total if text and pos == len(text) else None


def _parse(pattern: str, zone_name: str | None) -> _Pattern:
    """The schedule of ``Nats-Schedule``; ``BusRefusedError`` where NATS answers 400."""
    if zone_name is not None:
        try:
            zone = ZoneInfo(zone_name) if zone_name else _UTC
        except (ZoneInfoNotFoundError, ValueError):
            raise BusRefusedError(f"message schedules time zone {zone_name!r} is invalid") from None
    else:
        zone = _UTC
    if pattern.startswith("@at ") and zone_name is None:
        try:
            at = datetime.fromisoformat(pattern[4:].replace("Z", "+00:00"))
        except ValueError:
            at = None
        if at is not None and at.tzinfo is not None and "T" in pattern[4:].upper():
            return _Pattern(at=at.timestamp())
    elif pattern.startswith("@every ") and zone_name is None:
        every = _go_duration(pattern[7:])
        if every is not None and every >= 1:
            return _Pattern(every=every)
    else:
        cron = _PREDEFINED.get(pattern, pattern)
        if len(cron.split()) == 6 and croniter.is_valid(cron, second_at_beginning=True):
            return _Pattern(cron=cron, zone=zone)
    raise BusRefusedError(f"message schedules pattern {pattern!r} is invalid")


def _publishable(subject: str) -> bool:
    tokens = subject.split(".")
    return bool(subject) and all(t and t not in ("*", ">") and " " not in t for t in tokens)


@dataclass
class _Schedule:
    stream: _Stream
    subject: str
    seq: int  # the definition's sequence: gone from the stream, the schedule is gone
    due: float
    pattern: _Pattern


class Schedules:
    """The schedules of one ``MemoryBus``; it calls ``admit`` before storing a message and
    ``stored`` after."""

    def __init__(self, bus: MemoryBus) -> None:
        self.bus = bus
        self._defined: dict[tuple[str, str], _Schedule] = {}  # (stream, definition subject)
        self._task: asyncio.Task[None] | None = None

    def admit(self, stream: _Stream, subject: str, headers: dict[str, str]) -> dict[str, str]:
        """The headers a message is stored with; a definition NATS would refuse is refused."""
        pattern = headers.get("Nats-Schedule")
        if pattern is None:
            return headers
        if not stream.config.schedules:  # NATS: 10188, the stream does not allow message schedules
            raise BusRefusedError(f"stream {stream.config.name} does not take message schedules ({subject})")
        _parse(pattern, headers.get("Nats-Schedule-Time-Zone"))
        target = headers.get("Nats-Schedule-Target", "")
        if not _publishable(target) or target == subject or not stream.takes(target):
            raise BusRefusedError(f"message schedules target {target!r} of {subject} is invalid")
        if headers.get("Nats-Schedule-Rollup", "sub") != "sub" or "Nats-Rollup" in headers:
            raise BusRefusedError(f"message schedules invalid rollup on {subject}")
        for unmodelled in ("Nats-Schedule-Source", "Nats-Schedule-TTL"):
            if unmodelled in headers:
                raise BusRefusedError(f"{unmodelled} is not modelled by the in-memory bus")
        return {**headers, "Nats-Rollup": "sub"}

    def stored(self, stream: _Stream, message: Message) -> None:
        """What storing ``message`` does beyond keeping it: a rollup, the purge a fired ``@at``
        asks for, a definition (re)placed."""
        headers = message.headers or {}
        rollup = headers.get("Nats-Rollup")
        if rollup in ("sub", "all"):
            self._remove(
                stream, lambda m: m.seq < message.seq and (rollup == "all" or m.subject == message.subject)
            )
        scheduler = headers.get("Nats-Scheduler")
        if headers.get("Nats-Schedule-Next") == "purge" and scheduler:
            self._remove(stream, lambda m: m.subject == scheduler)
            self._defined.pop((stream.config.name, scheduler), None)
        pattern = headers.get("Nats-Schedule")
        if pattern is not None:
            parsed = _parse(pattern, headers.get("Nats-Schedule-Time-Zone"))
            self._defined[(stream.config.name, message.subject)] = _Schedule(
                stream, message.subject, message.seq, parsed.first(message.stamp), parsed
            )
            if self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._run(), name="memory-bus-schedules")

    @staticmethod
    def _remove(stream: _Stream, which: Callable[[Message], bool]) -> None:
        for seq in [seq for seq, m in stream.messages.items() if which(m)]:
            del stream.messages[seq]

    async def _run(self) -> None:
        while self._defined:
            now = self.bus.wall()
            for key, sch in sorted(self._defined.items(), key=lambda kv: kv[1].seq):
                if sch.seq not in sch.stream.messages:  # purged or replaced: it never fires
                    if self._defined.get(key) is sch:
                        del self._defined[key]
                elif sch.due <= now:
                    await self._fire(key, sch, now)
            if not self._defined:
                return
            wait = min(s.due for s in self._defined.values()) - self.bus.wall()
            await asyncio.sleep(min(_STEP, max(wait, 0.0)))

    async def _fire(self, key: tuple[str, str], sch: _Schedule, now: float) -> None:
        definition = sch.stream.messages[sch.seq]
        own = definition.headers or {}
        headers = {k: v for k, v in own.items() if not k.startswith(_NOT_COPIED)}
        headers["Nats-Scheduler"] = sch.subject
        if sch.pattern.repeats:
            sch.due = sch.pattern.after(sch.due, now)
            headers["Nats-Schedule-Next"] = rfc3339(datetime.fromtimestamp(sch.due, sch.pattern.zone))
        else:
            headers["Nats-Schedule-Next"] = "purge"  # stored, the fire removes its definition
            if self._defined.get(key) is sch:
                del self._defined[key]
        if own.get("Nats-Schedule-Rollup") == "sub":
            headers["Nats-Rollup"] = "sub"
        try:
            await self.bus.publish(own["Nats-Schedule-Target"], definition.data, headers=headers)
        except Exception:
            log.exception("in-memory bus: the fire of schedule %s was not stored", sch.subject)

    async def close(self) -> None:
        """Forget every schedule and stop firing (the definitions stay in their streams)."""
        self._defined.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def rfc3339(t: datetime) -> str:
    """Go's ``time.RFC3339`` layout: to the second, ``Z`` for a zero offset."""
    offset = t.utcoffset() or timedelta(0)
    text = t.strftime("%Y-%m-%dT%H:%M:%S")
    if not offset:
        return text + "Z"
    minutes = abs(int(offset.total_seconds())) // 60
    return f"{text}{'+' if offset > timedelta(0) else '-'}{minutes // 60:02d}:{minutes % 60:02d}"
