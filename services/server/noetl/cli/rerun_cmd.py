"""``noetl rerun ID [--from STEP] [--payload JSON] [--playbook FILE | --version V]`` (issue 31).

It says what the rerun keeps and what it cannot keep before it starts it (``--dry-run`` stops
there), then starts the new execution and prints its id. A refusal (still running, a step that
never ran, nothing failed and no ``--from``) exits 2 with what to do.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from noetl.cli.as_principal import call_service, principal_token, service_error
from noetl.cli.ops_cmd import _check_id, _print_json, client_parser


def describe(out: dict[str, Any]) -> list[str]:
    """The plan in sentences: from where, what is kept, what is not."""
    lines = [f"rerun of {out['from_execution_id']} from {', '.join(out['from_steps'])}"]
    kept = out.get("kept") or []
    if kept:
        steps = ", ".join(dict.fromkeys(k["step"] for k in kept))
        lines.append(f"  kept ({len(kept)} step runs, not run again): {steps}")
    for note in out.get("not_kept") or []:
        lines.append(f"  not kept: {note}")
    return lines


async def _rerun(nc: Any, args: argparse.Namespace) -> int:
    from noetl.dsl.validate import read_text

    _check_id(args.execution_id)
    payload = _payload(args.payload)
    text = None
    if args.playbook:
        text, problem = read_text(args.playbook)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
    if principal_token():  # as a principal: the checked NATS service plans and starts it
        out = await _rerun_by_service(nc, args, payload, text)
    else:
        out = await _rerun_here(nc, args, payload, text)
    if out is None:
        return 2
    if args.json:
        _print_json(out)
        return 0
    for line in describe(out):
        print(line, file=sys.stderr)
    if args.dry_run:
        print("dry run: nothing started", file=sys.stderr)
    else:
        print(out["execution_id"])
    return 0


def _payload(raw: str | None) -> Any:
    if raw is None:
        return None
    try:
        payload = json.loads(raw)
    except ValueError as e:
        raise SystemExit(f"noetl: --payload is not JSON ({e}); e.g. --payload '{{\"n\": 3}}'") from None
    if not isinstance(payload, dict):
        raise SystemExit("noetl: --payload must be a JSON object, e.g. --payload '{\"n\": 3}'")
    return payload


async def _rerun_by_service(
    nc: Any, args: argparse.Namespace, payload: Any, text: str | None
) -> dict[str, Any] | None:
    """The plan (and the new execution's id) from the NATS service; None when it refused (said)."""
    body: dict[str, Any] = {"execution_id": args.execution_id, "dry_run": bool(args.dry_run)}
    for key, value in (
        ("from", args.from_step), ("payload", payload), ("playbook", text),
        ("version", args.version), ("request_id", args.request_id),
    ):
        if value is not None:
            body[key] = value
    out: dict[str, Any] = await call_service(nc, "noetl.api.rerun", body)
    if (refused := service_error(out)) is not None:
        print(f"noetl: {refused.get('message')} ({refused.get('kind')})", file=sys.stderr)
        return None
    return out


async def _rerun_here(
    nc: Any, args: argparse.Namespace, payload: Any, text: str | None
) -> dict[str, Any] | None:
    """The plan made, and the rerun started, by this process; None when refused (said)."""
    from noetl.client.run import submit
    from noetl.events.nats_port import NatsBus
    from noetl.server.rerun import prepare_rerun
    from noetl.store.catalog import Catalog

    bus = NatsBus(nc)
    catalog = await Catalog.open(bus)
    got = await prepare_rerun(
        bus,
        catalog,
        args.execution_id,
        from_step=args.from_step,
        payload=payload,
        playbook=text,
        version=args.version,
        request_id=args.request_id,
    )
    if isinstance(got, dict):
        err = got["error"]
        print(f"noetl: {err.get('message')} ({err.get('kind')})", file=sys.stderr)
        return None
    out = got.to_dict()
    if not args.dry_run:
        out["execution_id"] = await submit(bus, got.request)
    return out


def add_parsers(sub: Any, nats_url_default: str) -> None:
    p = client_parser(
        sub,
        "rerun",
        "a new execution forked from a finished one, from a step, with a new payload or playbook",
        _rerun,
        nats_url_default,
    )
    p.add_argument("execution_id")
    p.add_argument(
        "--from", dest="from_step", help="the step to continue from (default: the steps that failed)"
    )
    p.add_argument("--payload", help="JSON merged over the original request's payload")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--playbook", help="run this playbook file from the fork point on")
    which.add_argument("--version", help="run this catalog version of the original's path")
    p.add_argument("--request-id", help="an id of your own: sending it again starts one rerun")
    p.add_argument(
        "--dry-run", action="store_true", help="say what would be kept and what not; start nothing"
    )
    p.add_argument("--json", action="store_true", help="print the plan (and the new execution_id) as JSON")
