"""Commands that reach a running execution from outside (SEMANTICS §17) and the schedules that
start executions (§18): ``signal``, ``pause``, ``resume``, ``schedule``.

Like the other operations commands they talk to NATS directly, so they work with any number of
server replicas; a refusal (no such execution, one that has finished, a bad name) exits 2 with the
reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from noetl.cli.as_principal import call_service, principal_token
from noetl.cli.ops_cmd import _check_id, _print_json, action_parsers, client_parser


def _answer(out: dict[str, Any]) -> int:
    if "error" in out:
        err = out["error"]
        print(f"noetl: {err.get('message')} ({err.get('kind')})", file=sys.stderr)
        return 2
    _print_json(out)
    return 0


def _json_arg(text: str | None, flag: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        raise SystemExit(f"noetl: {flag} is not JSON ({e}); e.g. {flag} '{{\"approved\": true}}'") from None


async def _signal(nc: Any, args: argparse.Namespace) -> int:
    from noetl.client.run import signal
    from noetl.events.nats_port import NatsBus

    _check_id(args.execution_id)
    data = _json_arg(args.data, "--data")
    if principal_token():
        body = {"execution_id": args.execution_id, "signal": args.name, "data": data}
        body["request_id"] = args.request_id
        if args.force:
            body["force"] = True
        return _answer(await call_service(nc, "noetl.api.signal", body))
    return _answer(
        await signal(NatsBus(nc), args.execution_id, args.name, data, args.request_id, force=args.force)
    )


async def _pause(nc: Any, args: argparse.Namespace) -> int:
    from noetl.client.run import pause
    from noetl.events.nats_port import NatsBus

    _check_id(args.execution_id)
    if principal_token():
        body = {"execution_id": args.execution_id, "reason": args.reason}
        return _answer(await call_service(nc, "noetl.api.pause", body))
    return _answer(await pause(NatsBus(nc), args.execution_id, args.reason))


async def _resume(nc: Any, args: argparse.Namespace) -> int:
    from noetl.client.run import resume
    from noetl.events.nats_port import NatsBus

    _check_id(args.execution_id)
    if principal_token():
        return _answer(await call_service(nc, "noetl.api.resume", {"execution_id": args.execution_id}))
    return _answer(await resume(NatsBus(nc), args.execution_id))


def _print_schedules(out: list[dict[str, Any]], as_json: bool) -> int:
    if as_json:
        _print_json(out)
        return 0
    for sch in out:
        state = "paused" if sch.get("paused") else "active"
        skipped = ""
        if sch.get("skipped"):  # --overlap skip: due times that started nothing
            skipped = f"  skipped {sch['skipped']}, last {sch.get('last_skipped')}"
        print(
            f"{sch['name']:<24} {state:<7} {sch['cron']!r:<20} {sch.get('timezone') or 'UTC':<16} "
            f"{sch['path']}  next {sch.get('next_fire') or '-'}{skipped}"
        )
    return 0


def _schedule_body(args: argparse.Namespace) -> dict[str, Any]:
    """``noetl schedule add``'s flags as the request body of ``/api/schedules`` and the service."""
    body: dict[str, Any] = {"path": args.path, "cron": args.cron, "overlap": args.overlap}
    for key, value in (("version", args.version), ("timezone", args.timezone),
                       ("payload", _json_arg(args.payload, "--payload"))):
        if value is not None:
            body[key] = value
    return body


async def _schedule(nc: Any, args: argparse.Namespace) -> int:
    from noetl.events.nats_port import NatsBus
    from noetl.store.schedules import ScheduleStore

    if principal_token():  # as a principal: the checked NATS service
        subject = f"noetl.api.schedule.{args.action}"
        body = {} if args.action == "list" else {"name": args.name}
        if args.action == "add":
            body.update(_schedule_body(args))
        got = await call_service(nc, subject, body)
        if args.action != "list" or "error" in got:
            return _answer(got)
        return _print_schedules(got.get("schedules") or [], args.json)
    store = await ScheduleStore.open(NatsBus(nc))
    if args.action == "list":
        return _print_schedules(await store.list(), args.json)
    if args.action == "add":  # as /api/schedules: a schedule of a playbook not in the catalog is refused
        return _answer(await store.add_request(args.name, _schedule_body(args)))
    if args.action == "pause":
        return _answer(await store.set_paused(args.name, True))
    if args.action == "resume":
        return _answer(await store.set_paused(args.name, False))
    return _answer(await store.delete(args.name))


def add_parsers(sub: Any, nats_url_default: str) -> None:
    def parser(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        return client_parser(sub, name, help_text, fn, nats_url_default)

    p = parser("signal", "send a signal to an execution (a step awaiting it takes it)", _signal)
    p.add_argument("execution_id")
    p.add_argument("name", help="the signal's name, as in the step's lifecycle.await.signal")
    p.add_argument("--data", help="the signal's data as JSON; the step sees it as args.signal")
    p.add_argument("--request-id", help="an id of your own: sending it again sends the signal once")
    p.add_argument(
        "--force", action="store_true", help="send it even though no step waits for or awaits that name"
    )

    p = parser("pause", "schedule nothing new in an execution until it is resumed", _pause)
    p.add_argument("execution_id")
    p.add_argument("--reason", help="why, recorded in execution.paused")

    p = parser("resume", "resume a paused execution", _resume)
    p.add_argument("execution_id")

    p = parser("schedule", "add, list, pause, resume or delete schedules (cron)", _schedule)
    action = action_parsers(p)

    a = action("add", "start a catalog playbook on a cron schedule")
    a.add_argument("name", help="1 to 64 letters, digits, '-' or '_'")
    a.add_argument("--path", required=True, help="the catalog path of the playbook")
    a.add_argument("--version", help="the playbook version (default: latest at each fire)")
    a.add_argument(
        "--cron",
        required=True,
        help="5 fields (minute hour day month weekday), or 6 with seconds first: '*/5 * * * * *'",
    )
    a.add_argument("--timezone", help="an IANA time zone, e.g. Europe/Paris (default UTC)")
    a.add_argument("--payload", help="the request payload as JSON")
    a.add_argument(
        "--overlap",
        choices=["skip", "allow"],
        default="allow",
        help="skip: no fire while the schedule's previous execution still runs",
    )
    a = action("list", "every schedule, with its next fire")
    a.add_argument("--json", action="store_true", help="print JSON")
    for name, text in (("pause", "stop firing"), ("resume", "fire again"), ("delete", "remove it")):
        action(name, text).add_argument("name")
