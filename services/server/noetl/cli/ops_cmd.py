"""Operations commands: ``status``, ``events``, ``logs``, ``executions``, ``cancel``, ``workers``,
``credentials``.

They talk to NATS directly (the event log, the runtime bucket, the keychain bucket), not to a
server's HTTP API: they work with any number of server replicas, with none running at all
(``status`` of a finished execution), and need no second address besides ``--nats-url``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from noetl.cli.as_principal import call_service, principal_token, service_error
from noetl.cli.session import DEFAULT_TIMEOUT


def _run(fn: Callable[[Any, argparse.Namespace], Awaitable[int]]) -> Callable[[argparse.Namespace], int]:
    def cmd(args: argparse.Namespace) -> int:
        from noetl.cli.session import cli_connect, run_bounded

        async def main() -> int:
            nc = await cli_connect(args.nats_url, f"noetl-{args.command}")
            try:
                # as a principal (NOETL_TOKEN) the CLI reads no events itself: ids go whole to the service
                if isinstance(getattr(args, "execution_id", None), str) and not principal_token():
                    from noetl.events.nats_port import NatsBus
                    from noetl.server.api.queries import resolve_execution_id

                    # the short ids the console and `noetl executions` show work here too
                    full = await resolve_execution_id(NatsBus(nc), args.execution_id)
                    if isinstance(full, dict):
                        print(f"noetl: {full['error']['message']}", file=sys.stderr)
                        return 2
                    args.execution_id = full
                return await fn(nc, args)
            finally:
                await nc.close()

        timeout = None if getattr(args, "follow", False) else args.timeout
        try:
            return int(run_bounded(main, args.command, timeout))
        except KeyboardInterrupt:
            return 130
        except BrokenPipeError:  # `noetl events ID | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    return cmd


def _print_json(value: Any) -> None:
    print(json.dumps(value, default=str))


def _check_id(execution_id: str) -> None:
    from noetl.server.api.queries import valid_execution_id

    if not valid_execution_id(execution_id):
        raise SystemExit(f"noetl: {execution_id!r} is not an execution id")


def _no_such_execution(execution_id: str) -> int:
    """Exit 2, as for every call naming an execution that was never requested (not a failed run)."""
    print(f"noetl: no execution {execution_id}", file=sys.stderr)
    return 2


async def _status(nc: Any, args: argparse.Namespace) -> int:
    from noetl.events.nats_port import NatsBus
    from noetl.server.api.queries import execution_status

    _check_id(args.execution_id)
    if principal_token():  # as a principal, through the checked NATS service
        got = await call_service(nc, "noetl.api.status", {"execution_id": args.execution_id})
        if (refused := service_error(got)) is not None:
            if refused.get("kind") == "not_found":
                return _no_such_execution(args.execution_id)
            print(f"noetl: {refused.get('message')} ({refused.get('kind')})", file=sys.stderr)
            return 2
        out: dict[str, Any] | None = got
    else:
        out = await execution_status(NatsBus(nc), args.execution_id)
    if out is None:
        return _no_such_execution(args.execution_id)
    if args.json:
        _print_json(out)
        return 0
    from noetl.cli.output import summary

    print(summary(out))
    return 0


async def _events(nc: Any, args: argparse.Namespace) -> int:
    from noetl.cli.lines import EventLines
    from noetl.events.nats_port import NatsBus
    from noetl.server.api.follow import follow_events

    _check_id(args.execution_id)
    seen = 0
    lines = EventLines()  # knows each task event's step and iteration from the events before it
    if principal_token():  # as a principal, through the checked NATS service
        from noetl.cli.as_principal import events_of, refusal_exit

        events = events_of(nc, args.execution_id, follow=args.follow)
    else:
        events = follow_events(NatsBus(nc), args.execution_id, follow=args.follow)
    async for ev in events:
        if ev is None:
            continue
        if (code := refusal_exit(ev) if "error" in ev and "name" not in ev else None) is not None:
            return code
        seen += 1
        print(json.dumps(ev, default=str) if args.json else lines.line(ev), flush=True)
    if not seen:
        print(f"noetl: no events of {args.execution_id}", file=sys.stderr)
        return 1
    return 0


async def _logs(nc: Any, args: argparse.Namespace) -> int:
    from noetl.cli.lines import output_lines
    from noetl.events.nats_port import NatsBus
    from noetl.server.api.queries import execution_logs

    _check_id(args.execution_id)
    if principal_token():  # as a principal, through the checked NATS service
        from noetl.cli.as_principal import refusal_exit

        got = await call_service(nc, "noetl.api.logs", {"execution_id": args.execution_id, "step": args.step})
        if (code := refusal_exit(got)) is not None:
            return 2 if code == 1 else code  # an unknown execution: exit 2, as below
        out = got.get("logs")
    else:
        out = await execution_logs(NatsBus(nc), args.execution_id, args.step)
    if out is None:
        return _no_such_execution(args.execution_id)
    if args.json:
        _print_json(out)
        return 0
    for entry in out:
        print("\n".join(output_lines(entry)))
    if not out:
        which = f" of step {args.step!r}" if args.step else ""
        print(f"noetl: no task{which} printed or logged anything", file=sys.stderr)
    return 0


def _outside_note(e: dict[str, Any]) -> str:
    """What a listed execution owes to the outside (SEMANTICS §17, §18): the schedule that started
    it, a pause, the signals it waits for, so an operator sees who has to act without `status`."""
    notes = [f"schedule {e['schedule']}"] if e.get("schedule") else []
    if e.get("paused"):
        notes.append("paused")
    notes += [f"waiting: step {w.get('step')} for signal {w.get('signal')!r}" for w in e.get("waiting") or []]
    if e.get("stalled"):
        notes.append(f"{e['stalled']['state']} {e['stalled']['idle_s']:.0f} s")
    return "".join(f"  ({n})" for n in notes)


async def _executions(nc: Any, args: argparse.Namespace) -> int:
    from noetl.events.nats_port import NatsBus
    from noetl.server.api.queries import list_executions

    if principal_token():  # as a principal: only the namespaces it may read, checked by the service
        from noetl.cli.as_principal import refusal_exit

        body = {"status": args.status, "path": args.path, "limit": args.limit}
        out = await call_service(nc, "noetl.api.executions", body)
        if (code := refusal_exit(out)) is not None:
            return code
    else:
        out = await list_executions(NatsBus(nc), status=args.status, path=args.path, limit=args.limit)
    if args.json:
        _print_json(out)
        return 0
    for e in out["executions"]:
        print(
            f"{e['execution_id']}  {e['status']:<9} {e.get('requested_at') or '-':<32} {e.get('path') or '-'}"
            + _outside_note(e)
        )
    if out["next_cursor"] is not None:
        print(f"(more: --limit larger than {args.limit})", file=sys.stderr)
    return 0


async def _cancel(nc: Any, args: argparse.Namespace) -> int:
    from noetl.client.run import cancel as request_cancel
    from noetl.events.nats_port import NatsBus

    _check_id(args.execution_id)
    if principal_token():
        body = {"execution_id": args.execution_id, "reason": args.reason}
        got = await call_service(nc, "noetl.api.cancel", body)
        if (refused := service_error(got)) is not None:
            if refused.get("kind") == "not_found":
                return _no_such_execution(args.execution_id)
            print(f"noetl: {refused.get('message')} ({refused.get('kind')})", file=sys.stderr)
            return 2
        _print_json(got)
        return 0
    out = await request_cancel(NatsBus(nc), args.execution_id, args.reason)
    if out is None:
        return _no_such_execution(args.execution_id)
    _print_json(out)
    return 0


async def _workers(nc: Any, args: argparse.Namespace) -> int:
    from noetl.events.nats_port import NatsBus
    from noetl.events.runtime import list_runtime

    entries = await list_runtime(NatsBus(nc), None if args.all else "worker")
    if args.json:
        _print_json(entries)
        return 0
    for e in entries:
        print(
            f"{e.get('role', ''):<7} {e.get('id', ''):<36} pool={e.get('pool') or '-'} "
            f"running={e.get('running')}/{e.get('concurrency')} version={e.get('version')} "
            f"since={e.get('started_at')}"
        )
    if not entries:
        print("noetl: no live process registered in noetl_runtime", file=sys.stderr)
    return 0


def action_parsers(p: argparse.ArgumentParser) -> Callable[[str, str], argparse.ArgumentParser]:
    """Sub-actions of a command (``credentials set``, ``schedule add``) that take the connection
    options after the action too (``credentials list --nats-url X``); SUPPRESS keeps the
    parent's value when they are not given there."""
    actions = p.add_subparsers(dest="action", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        a = actions.add_parser(name, help=help_text)
        a.add_argument(
            "--nats-url", default=argparse.SUPPRESS, help="NATS URL, or a comma-separated list of a cluster's"
        )
        a.add_argument(
            "--timeout", type=float, default=argparse.SUPPRESS, help="give up after this many seconds"
        )
        return a

    return action


def client_parser(
    sub: Any, name: str, help_text: str, fn: Any, nats_url_default: str, *, timeout_help: str = ""
) -> argparse.ArgumentParser:
    """A command that talks to a deployment: ``--nats-url`` and ``--timeout``, and ``fn`` run
    with a client (``afn``: the coroutine, for callers with a loop and a client of their own)."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    p.add_argument(
        "--nats-url", default=nats_url_default, help="NATS URL, or a comma-separated list of a cluster's"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"give up after this many seconds{timeout_help}",
    )
    p.set_defaults(fn=_run(fn), afn=fn)
    return p


def add_parsers(sub: Any, nats_url_default: str) -> None:
    """The operations commands: those on executions and workers, then `credentials`."""
    _add_execution_parsers(sub, nats_url_default)
    _add_credentials_parser(sub, nats_url_default)


def _add_execution_parsers(sub: Any, nats_url_default: str) -> None:
    def parser(name: str, help_text: str, fn: Any) -> argparse.ArgumentParser:
        return client_parser(sub, name, help_text, fn, nats_url_default, timeout_help=" (not with --follow)")

    p = parser("status", "status, ctx, step runs and result of an execution", _status)
    p.add_argument("execution_id")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = parser("events", "print an execution's events (--follow: until it is processed)", _events)
    p.add_argument("execution_id")
    p.add_argument(
        "-f", "--follow", action="store_true", help="keep printing until the execution is processed"
    )
    p.add_argument("--json", action="store_true", help="one JSON event per line")

    p = parser("logs", "what an execution's tasks printed or logged (masked, 64 KiB per task run)", _logs)
    p.add_argument("execution_id")
    p.add_argument("--step", help="only this step's task runs")
    p.add_argument("--json", action="store_true", help="print JSON: one entry per task run")

    p = parser("executions", "list executions, newest first", _executions)
    p.add_argument(
        "--status",
        choices=["running", "success", "failed", "cancelled"],
        help="only executions with this status",
    )
    p.add_argument("--path", help="only executions of this playbook path")
    p.add_argument("--limit", type=int, default=50, help="at most this many, newest first")
    p.add_argument("--json", action="store_true", help="print JSON")

    p = parser("cancel", "ask for an execution to be cancelled", _cancel)
    p.add_argument("execution_id")
    p.add_argument("--reason", help="why, recorded in the cancel event")

    p = parser("workers", "live workers (--all: servers too) from noetl_runtime", _workers)
    p.add_argument("--all", action="store_true", help="servers too, not only workers")
    p.add_argument("--json", action="store_true", help="print JSON")


def _add_credentials_parser(sub: Any, nats_url_default: str) -> None:
    from noetl.cli.credentials_cmd import _credentials

    p = client_parser(
        sub,
        "credentials",
        "set, list or delete keychain entries (NOETL_CREDENTIALS_KEY)",
        _credentials,
        nats_url_default,
        timeout_help=" (not with --follow)",
    )
    action = action_parsers(p)

    a = action("set", "store a credential, encrypted")
    a.add_argument("name")
    a.add_argument(
        "--kind", default="secret", help="the credential kind (postgres_credential, http, secret, ...)"
    )
    a.add_argument("--data", help="the fields as JSON")
    a.add_argument("--data-file", help="a JSON or YAML file with the fields")
    a.add_argument(
        "--scope",
        action="append",
        metavar="PATH",
        help="a catalog path, a prefix ending in '/', or '*' that may use it (repeatable; default '*')",
    )
    a.add_argument(
        "--allow-inline",
        action="store_true",
        help="inline playbooks (sent with the request, not registered) may use it too; off by default",
    )
    a.add_argument(
        "--inputs",
        metavar="JSON",
        help='the only inputs (payload keys) a run of a playbook using it accepts, each with the values '
        'or the pattern it must have: {"url": {"pattern": "https://api\\.example\\.com/.*"}, '
        '"region": {"values": ["eu", "us"]}, "day": {}}; default: any input',
    )
    a.add_argument(
        "--no-inputs",
        action="store_true",
        help="a run of a playbook using it accepts no input at all: it runs on its own workload",
    )
    a.add_argument("--allow-weak", action="store_true",
                   help="store a secret shorter than 8 characters or a common word all the same")
    a.add_argument("--anonymous", action="store_true",
                   help="write over an anonymous NATS connection (a private nats-server only)")
    action("list", "names and kinds, never values")
    a = action("delete", "delete a credential with its history")
    a.add_argument("name")
    a.add_argument("--anonymous", action="store_true",
                   help="delete over an anonymous NATS connection (a private nats-server only)")
