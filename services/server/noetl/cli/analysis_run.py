"""`noetl graph` and `noetl replay`: the commands that may read an execution from NATS."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from noetl.dsl.validate import read_text, validate_text


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


async def read_events(nats_url: str, execution_id: str) -> list[dict[str, Any]]:
    """The execution's log as the engine folds it (the request with its playbook's text)."""
    from noetl.events.bus import connect, read_execution_events
    from noetl.events.catalog import Catalog

    nc = await connect(nats_url, name="noetl-analysis", max_reconnect_attempts=1)
    try:
        js = nc.jetstream()
        catalog = await Catalog.open(js)
        return [await catalog.with_playbook_text(e) for e in await read_execution_events(js, execution_id)]
    finally:
        await nc.close()


def _events_file(path: str) -> list[dict[str, Any]]:
    data = json.loads(Path(path).read_text())
    return data.get("events", []) if isinstance(data, dict) else data


async def graph(args: argparse.Namespace) -> int:
    from noetl.dsl.analysis.context import Analysis
    from noetl.dsl.analysis.coverage import trace
    from noetl.dsl.analysis.mermaid import mermaid
    from noetl.dsl.analysis.petri import analyze_net
    from noetl.dsl.validate import load_playbook

    text = _valid_text(args.file)
    if text is None:
        return 2
    playbook = load_playbook(text, args.file)
    net = analyze_net(Analysis.build(playbook))
    dead = {key for key, fires in net.arc_fires.items() if not fires}
    t = None
    if args.events or args.execution:
        events = (
            _events_file(args.events) if args.events else await read_events(args.nats_url, args.execution)
        )
        if not events:
            print(f"noetl: no events for execution {args.execution}", file=sys.stderr)
            return 1
        t = trace(events)
    out = mermaid(playbook, t, dead)
    if args.out:
        Path(args.out).write_text(out)
        print(f"wrote {args.out}", file=sys.stderr)
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
