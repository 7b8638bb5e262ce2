"""`noetl graph` and `noetl replay`: the commands that may read an execution from NATS."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from noetl.dsl.validate import read_text, validate_text
from noetl.events.envelope import Event


def _valid_text(file: str) -> str | None:
    """The file's text when it reads and validates; otherwise every problem is printed."""
    text, problem = read_text(file)
    if text is None:
        print(problem, file=sys.stderr)
        return None
    problems = validate_text(text, file)
    for p in problems:
        print(p, file=sys.stderr)
    return None if problems else text


async def read_events(nats_url: str, execution_id: str) -> list[Event]:
    """The execution's log as the engine folds it (the request with its playbook's text)."""
    from noetl.events.bus import connect, read_execution_events
    from noetl.events.nats_port import NatsBus
    from noetl.store.catalog import Catalog

    nc = await connect(nats_url, name="noetl-analysis", max_reconnect_attempts=1)
    try:
        bus = NatsBus(nc)
        catalog = await Catalog.open(bus)
        return [await catalog.with_playbook_text(e) for e in await read_execution_events(bus, execution_id)]
    finally:
        await nc.close()


def _events_file(path: str) -> list[Event]:
    """Events saved as JSON (``noetl run --json``'s object, or a bare list): read as they were
    written, unchecked, like the log they came from."""
    data = json.loads(Path(path).read_text())
    events: list[Event] = data.get("events", []) if isinstance(data, dict) else data
    return events


async def _execution_playbook(nats_url: str, execution_id: str) -> tuple[list[Event], str | None]:
    """The execution's events and the text of the playbook it ran: the text its request event
    keeps, else the catalog's copy by the recorded digest (every request's text is stored there
    before it is accepted), else the catalog's entry for the recorded path and version when that
    entry still has the recorded digest. None when none of them has it."""
    from noetl.dsl.cache import digest_of
    from noetl.events.bus import connect, read_execution_events
    from noetl.events.nats_port import NatsBus
    from noetl.store.catalog import Catalog

    nc = await connect(nats_url, name="noetl-analysis", max_reconnect_attempts=1)
    try:
        bus = NatsBus(nc)
        catalog = await Catalog.open(bus)
        events = await read_execution_events(bus, execution_id)
        request = _request_of(events)
        if request is None:
            return events, None
        text = request.get("playbook")
        digest = request.get("digest")
        if not isinstance(text, str) and isinstance(digest, str):
            text = await catalog.get_by_digest(digest)
        if not isinstance(text, str) and request.get("path"):
            text = await catalog.get(str(request["path"]), request.get("version"))
            if text is not None and digest and digest_of(text) != digest:
                text = None  # that path and version now hold another text
        return events, text if isinstance(text, str) else None
    finally:
        await nc.close()


def _request_of(events: list[Event]) -> dict[str, Any] | None:
    """The payload of the execution's ``playbook.execution.requested`` event, if recorded."""
    for e in events:
        if e.get("name") == "playbook.execution.requested":
            payload = e.get("payload")
            return payload if isinstance(payload, dict) else {}
    return None


def _describe_playbook(path: Any, version: Any, digest: str | None) -> str:
    parts = [f"path {path}" if path else "no metadata.path"]
    if version is not None:
        parts.append(f"version {version}")
    if digest:
        parts.append(f"digest {digest[:12]}")
    return ", ".join(parts)


def playbook_mismatch(request: dict[str, Any], file: str, text: str) -> str | None:
    """Why FILE is not the playbook the execution ran, or None when it is (or nothing recorded
    says otherwise). Why: drawing one playbook's run onto another colours the wrong arcs and
    steps without a word, so the texts are compared by digest (the request records the sha256 of
    the exact text it ran); path and version name the two for the reader."""
    from noetl.dsl.cache import digest_of
    from noetl.dsl.validate import load_playbook

    recorded = request.get("digest")
    if not isinstance(recorded, str) and isinstance(request.get("playbook"), str):
        recorded = digest_of(request["playbook"])
    meta = load_playbook(text, file).metadata
    mine = digest_of(text)
    if isinstance(recorded, str):
        if recorded == mine:
            return None
    elif (request.get("path"), request.get("version")) == (meta.path, meta.version) or not request:
        return None
    ran = _describe_playbook(request.get("path"), request.get("version"), recorded)
    given = _describe_playbook(meta.path, meta.version, mine)
    return f"ran another playbook ({ran}) than {file} ({given})"


def _why_no_text(request: dict[str, Any] | None) -> str:
    if request is None:
        return "has no recorded request (no playbook.execution.requested event)"
    named = _describe_playbook(request.get("path"), request.get("version"), request.get("digest"))
    return f"ran a playbook ({named}) whose text is neither in its events nor in the catalog"


async def graph(args: argparse.Namespace) -> int:
    source = args.execution or args.events
    if args.file is None and not source:
        print(
            "noetl graph: give a playbook FILE, or --execution ID (or --events RUN.json) to draw the "
            "playbook that execution ran",
            file=sys.stderr,
        )
        return 2
    text: str | None = None
    if args.file is not None:
        text = _valid_text(args.file)
        if text is None:
            return 2
    events: list[Event] = []
    recorded: str | None = None
    if args.events:
        events = _events_file(args.events)
        request = _request_of(events)
        recorded = request.get("playbook") if request else None
    elif args.execution:
        events, recorded = await _execution_playbook(args.nats_url, args.execution)
    where = f"execution {args.execution}" if args.execution else f"the execution in {args.events}"
    if source and not events:
        print(f"noetl graph: no events for {where}", file=sys.stderr)
        return 1
    request = _request_of(events) if source else None
    if text is not None and request is not None:
        mismatch = playbook_mismatch(request, args.file, text)
        if mismatch is not None:
            again = f"--execution {args.execution}" if args.execution else f"--events {args.events}"
            print(
                f"noetl graph: {where} {mismatch}: omit FILE to draw the execution's own playbook "
                f"(noetl graph {again}), or give the file it ran",
                file=sys.stderr,
            )
            return 2
    file = args.file
    if text is None:
        if not isinstance(recorded, str):
            print(f"noetl graph: {where} {_why_no_text(request)}: give the playbook FILE it ran",
                  file=sys.stderr)
            return 2
        text = recorded
        file = f"<playbook of {where}>"
    return _draw(text, file, events if source else None, args.out)


def _draw(text: str, file: str, events: list[Event] | None, out_file: str | None) -> int:
    """The playbook's net as Mermaid, its dead arcs marked, and ``events``' run on it if given."""
    from noetl.dsl.analysis.context import Analysis
    from noetl.dsl.analysis.coverage import trace
    from noetl.dsl.analysis.mermaid import mermaid
    from noetl.dsl.analysis.petri import analyze_net
    from noetl.dsl.validate import load_playbook

    playbook = load_playbook(text, file)
    net = analyze_net(Analysis.build(playbook))
    dead = {key for key, fires in net.arc_fires.items() if not fires}
    t = trace(events) if events is not None else None
    out = mermaid(playbook, t, dead)
    if out_file:
        Path(out_file).write_text(out)
        print(f"wrote {out_file}", file=sys.stderr)
    else:
        sys.stdout.write(out)
    return 0


async def replay(args: argparse.Namespace) -> int:
    from noetl.cli.replay_diff import render, replay_diff

    new_text = None
    if args.playbook:
        new_text = _valid_text(args.playbook)
        if new_text is None:
            return 2
    events = await read_events(args.nats_url, args.execution_id)
    if not any(e.get("name") == "playbook.execution.requested" for e in events):
        print(
            f"noetl: execution {args.execution_id} has no recorded request in the event stream",
            file=sys.stderr,
        )
        return 2
    report = replay_diff(events, new_text)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, default=str))
    else:
        print(render(report, args.playbook or "its recorded playbook"))
    return 1 if report.divergences else 0
