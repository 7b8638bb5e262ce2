"""`noetl exec` and `noetl catalog`: a request or a playbook sent to a running deployment (over
NATS, or through the NATS service as a principal)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from noetl.cli.main import _payload

if TYPE_CHECKING:
    from noetl.events.port import Bus


async def _exec(args: argparse.Namespace) -> dict[str, Any]:
    import uuid

    from noetl.cli.progress import Progress, run_with_progress, wanted
    from noetl.cli.session import cli_connect
    from noetl.client.run import submit
    from noetl.events.nats_port import NatsBus

    req: dict[str, Any] = {
        "request_id": args.request_id or uuid.uuid4().hex,
        "payload": _payload(args.payload),
    }
    if args.file:
        req["playbook"] = Path(args.file).read_text()
    else:
        req["path"] = args.path
        if args.version:
            req["version"] = args.version
    nc = await cli_connect(args.nats_url, "noetl-exec")
    try:
        from noetl.cli.as_principal import call_service, principal_token

        if principal_token():  # as a principal: the checked NATS service starts it, status polls it
            return await _exec_as_principal(nc, req, args, call_service)
        if args.file:  # a pool nobody serves would hold the execution without a word: say it now
            await _warn_unserved_pools(NatsBus(nc), req["playbook"], args.file)
        if args.wait:  # live progress on a terminal; task output stays in `noetl logs` otherwise
            live = Progress(sys.stderr, live=True) if wanted(args.json) else None
            return await run_with_progress(NatsBus(nc), req, args.timeout, live)
        return {"execution_id": await submit(NatsBus(nc), req)}
    finally:
        await nc.close()


async def _exec_as_principal(
    nc: Any, req: dict[str, Any], args: argparse.Namespace, call: Any
) -> dict[str, Any]:
    """``noetl exec`` with ``NOETL_TOKEN``: started through ``noetl.api.execute`` and, with
    ``--wait``, followed through ``noetl.api.status`` (a principal's NATS user reads no events)."""
    out: dict[str, Any] = await call(nc, "noetl.api.execute", req)
    if out.get("error") or not args.wait:
        return out
    while True:
        status = await call(nc, "noetl.api.status", {"execution_id": out["execution_id"]})
        if status.get("status") != "running":
            return {"execution_id": out["execution_id"], **status}
        await asyncio.sleep(0.5)


async def _warn_unserved_pools(bus: Bus, text: str, file: str) -> None:
    from noetl.cli.pools import playbook_pools, unserved_message, unserved_pools
    from noetl.dsl.cache import parse_playbook

    try:
        pools = playbook_pools(parse_playbook(text, file))
        missing = await unserved_pools(bus, pools)
    except Exception:  # an invalid playbook is refused by the server, with its lines
        return
    for pool in missing:
        print(unserved_message(pool, pools[pool]), file=sys.stderr)


def cmd_exec(args: argparse.Namespace) -> int:
    from noetl.cli.output import summary
    from noetl.cli.session import DEFAULT_TIMEOUT, run_bounded

    # --wait waits as long as --timeout says (forever without it); the rest is bounded anyway
    got = run_bounded(
        lambda: _exec(args), "exec", args.timeout if args.wait else args.timeout or DEFAULT_TIMEOUT
    )
    if isinstance(got, int):
        return got
    out = got
    if out.get("error") and not out.get("execution_id"):  # refused before anything was recorded
        err = out["error"]
        print(f"noetl: {err.get('message')} ({err.get('kind')})", file=sys.stderr)
        return 2
    if args.json or not args.wait:
        print(json.dumps(out, default=str))
    elif args.file:  # the text it sent: the error can name FILE:LINE
        print(summary(out, args.file, Path(args.file).read_text(errors="replace")))
    else:
        print(summary(out))
    return 0 if not args.wait or out.get("status") == "success" else 1


async def _catalog_as_principal(nc: Any, args: argparse.Namespace) -> int:
    """``noetl catalog register|list|show`` with ``NOETL_TOKEN``: through the checked NATS service."""
    from noetl.cli.as_principal import call_service, refusal_exit, service_error

    if args.action == "show":
        body = {"path": args.files[0], "version": args.version}
        out = await call_service(nc, "noetl.api.catalog.show", body)
        if (code := refusal_exit(out)) is not None:
            return code
        print(out.get("playbook"))
        return 0
    if args.action == "list":
        for e in (await call_service(nc, "noetl.api.catalog.list", {})).get("playbooks") or []:
            print(json.dumps(e))
        return 0
    failed = 0
    for f in args.files:
        try:
            text = Path(f).read_text()
        except OSError as e:
            print(f"{f}:0: <file>: cannot read: {e.strerror}", file=sys.stderr)
            failed += 1
            continue
        out = await call_service(nc, "noetl.api.catalog.register", {"playbook": text})
        if (refused := service_error(out)) is not None:
            for p in refused.get("problems") or [f"{f}: {refused.get('message')} ({refused.get('kind')})"]:
                print(p, file=sys.stderr)
            failed += 1
        else:
            print(json.dumps(out))
    return 2 if failed else 0


async def _catalog(args: argparse.Namespace) -> int:
    from noetl.cli.session import cli_connect
    from noetl.events.nats_port import NatsBus
    from noetl.events.streams import ensure_all
    from noetl.store.catalog import Catalog

    nc = await cli_connect(args.nats_url, "noetl-catalog")
    try:
        from noetl.cli.as_principal import principal_token

        if principal_token():
            return await _catalog_as_principal(nc, args)
        await ensure_all(nc.jetstream())
        cat = await Catalog.open(NatsBus(nc))
        if args.action == "register":
            from noetl.cli.credentials_cmd import nats_identity
            from noetl.dsl.errors import CatalogConflictError, PlaybookInvalidError

            failed = 0
            writer = nats_identity(nc) or "nats-anonymous"  # recorded with each version it writes
            for f in args.files:
                try:
                    entry = await cat.register(Path(f).read_text(), f, writer=writer)
                    print(json.dumps(entry))
                except OSError as e:
                    print(f"{f}:0: <file>: cannot read: {e.strerror}", file=sys.stderr)
                    failed += 1
                except PlaybookInvalidError as e:
                    for line in [str(p) for p in e.problems] or [e.message]:
                        print(line, file=sys.stderr)
                    failed += 1
                except CatalogConflictError as e:
                    print(f"{f}:0: metadata.version: {e.message}", file=sys.stderr)
                    failed += 1
            return 2 if failed else 0
        elif args.action == "list":
            for entry in await cat.list():
                print(json.dumps(entry))
        else:
            text = await cat.get(args.files[0], args.version)
            if text is None:
                print(f"noetl: no playbook {args.files[0]!r} in the catalog", file=sys.stderr)
                return 1
            print(text)
        return 0
    finally:
        await nc.close()


def cmd_catalog(args: argparse.Namespace) -> int:
    from noetl.cli.session import DEFAULT_TIMEOUT, run_bounded

    return int(run_bounded(lambda: _catalog(args), "catalog", DEFAULT_TIMEOUT))
