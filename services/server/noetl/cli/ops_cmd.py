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
from pathlib import Path
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
                    from noetl.server.api.queries import resolve_execution_id

                    # the short ids the console and `noetl executions` show work here too
                    full = await resolve_execution_id(nc.jetstream(), args.execution_id)
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
        out = await execution_status(nc.jetstream(), args.execution_id)
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
    from noetl.server.api.follow import follow_events

    _check_id(args.execution_id)
    seen = 0
    lines = EventLines()  # knows each task event's step and iteration from the events before it
    async for ev in follow_events(nc, args.execution_id, follow=args.follow):
        if ev is None:
            continue
        seen += 1
        print(json.dumps(ev, default=str) if args.json else lines.line(ev), flush=True)
    if not seen:
        print(f"noetl: no events of {args.execution_id}", file=sys.stderr)
        return 1
    return 0


async def _logs(nc: Any, args: argparse.Namespace) -> int:
    from noetl.cli.lines import output_lines
    from noetl.server.api.queries import execution_logs

    _check_id(args.execution_id)
    out = await execution_logs(nc.jetstream(), args.execution_id, args.step)
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
    from noetl.server.api.queries import list_executions

    out = await list_executions(nc.jetstream(), status=args.status, path=args.path, limit=args.limit)
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
    out = await request_cancel(nc.jetstream(), args.execution_id, args.reason)
    if out is None:
        return _no_such_execution(args.execution_id)
    _print_json(out)
    return 0


async def _workers(nc: Any, args: argparse.Namespace) -> int:
    from noetl.events.runtime import list_runtime

    entries = await list_runtime(nc.jetstream(), None if args.all else "worker")
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


def _credential_data(args: argparse.Namespace) -> dict[str, Any]:
    """The value comes from an argument or a file; errors never echo it back."""
    import yaml

    if (args.data is None) == (args.data_file is None):
        raise ValueError("give exactly one of --data JSON or --data-file FILE")
    try:
        text = args.data if args.data is not None else Path(args.data_file).read_text()
        value = yaml.safe_load(text)  # JSON is YAML; a file may be either
    except OSError as e:
        raise ValueError(f"cannot read {args.data_file}: {e.strerror}") from None
    except yaml.YAMLError:
        raise ValueError("credential data is neither JSON nor YAML") from None
    if not isinstance(value, dict):
        raise ValueError("credential data must be a mapping of fields")
    return value


def nats_identity(nc: Any) -> str | None:
    """Who a NATS connection says it is (a user name, a token's hash prefix, a credentials file),
    or None for an anonymous one. Never the password or token itself."""
    from noetl.store.audit import token_id

    opts = getattr(nc, "options", None) or {}
    if opts.get("user"):
        return f"nats-user:{opts['user']}"
    if opts.get("token"):
        return "nats-" + token_id(str(opts["token"]))
    if getattr(nc, "_user_credentials", None) or opts.get("nkeys_seed") or getattr(nc, "_nkeys_seed", None):
        return "nats-credentials"
    server = getattr(nc, "_current_server", None)
    user = getattr(getattr(server, "uri", None), "username", None)
    return f"nats-user:{user}" if user else None


async def _credentials(nc: Any, args: argparse.Namespace) -> int:
    """``noetl credentials set|list|delete`` on the KV bucket itself. A write or delete names
    its NATS identity in the audit trail (``noetl.audit.credentials``) before it happens, and is
    refused from an anonymous connection unless ``--anonymous`` says that is meant (a private
    nats-server): with an anonymous default server, anyone on the network could otherwise
    replace or delete a credential and leave no trace."""
    from noetl.dsl.errors import KeychainUnresolvedError
    from noetl.events.masking import weak_secrets
    from noetl.store.audit import ensure_audit_stream, record_credential_access
    from noetl.store.credentials import CredentialStore

    store = await CredentialStore.open(nc.jetstream(), None)
    who = nats_identity(nc)
    try:
        if args.action in ("set", "delete"):
            if who is None and not getattr(args, "anonymous", False):
                print(
                    f"noetl: refusing to {args.action} a credential over an anonymous NATS connection: "
                    "connect as a NATS user (NOETL_NATS_USER/PASSWORD, NOETL_NATS_CREDS, NOETL_NATS_TOKEN), "
                    "or pass --anonymous for a private nats-server",
                    file=sys.stderr,
                )
                return 2
            await ensure_audit_stream(nc.jetstream())
        if args.action == "set":
            data = _credential_data(args)
            weak = weak_secrets(data, args.kind)
            if weak and not getattr(args, "allow_weak", False):
                print(f"noetl: credential {args.name!r} holds {'; '.join(weak)}: use a stronger secret "
                      "(or --allow-weak)", file=sys.stderr)
                return 2
            scope = {"paths": args.scope or ["*"], "inline": args.allow_inline}
            await record_credential_access(
                nc.jetstream(), action="credential.put", credential=args.name, who=who or "anonymous",
                outcome="stored", kind=args.kind, remote="cli",
            )
            await store.put(args.name, args.kind, data, scope)
            _print_json({"name": args.name, "kind": args.kind, "scope": scope, "stored": True})
        elif args.action == "list":
            for e in await store.list():
                print(f"{e['name']}\t{e.get('kind')}")
        else:
            if not await store.exists(args.name):
                print(f"noetl: no credential {args.name!r}", file=sys.stderr)
                return 1
            await record_credential_access(
                nc.jetstream(), action="credential.delete", credential=args.name, who=who or "anonymous",
                outcome="deleted", remote="cli",
            )
            await store.delete(args.name)
            _print_json({"name": args.name, "deleted": True})
    except KeychainUnresolvedError as e:
        print(f"noetl: {e.message}", file=sys.stderr)
        return 2
    except ValueError as e:  # an invalid name or value (the message never holds the value)
        print(f"noetl: {e}", file=sys.stderr)
        return 2
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

    p = parser("credentials", "set, list or delete keychain entries (NOETL_CREDENTIALS_KEY)", _credentials)
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
    a.add_argument("--allow-weak", action="store_true",
                   help="store a secret shorter than 8 characters or a common word all the same")
    a.add_argument("--anonymous", action="store_true",
                   help="write over an anonymous NATS connection (a private nats-server only)")
    action("list", "names and kinds, never values")
    a = action("delete", "delete a credential with its history")
    a.add_argument("name")
    a.add_argument("--anonymous", action="store_true",
                   help="delete over an anonymous NATS connection (a private nats-server only)")
