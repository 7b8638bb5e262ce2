"""The ``noetl`` command line.

Exit codes: 0 success, 1 the execution failed, 2 the playbook or the request is invalid (the
contract of SEMANTICS §15). Results go to stdout; progress and logs to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def _say(role: str, message: str, level: int = 20, **fields: Any) -> None:
    """A service's own line on stderr: a log record when logs are JSON lines (a collector then
    reads one format only: no plain text mixed in), the plain ``noetl ROLE: ...`` line on a
    terminal. ``fields`` (a URL) become keys of the JSON line."""
    import logging

    from noetl.host.logs import log_format

    if log_format() == "json":
        logging.getLogger(f"noetl.{role}").log(level, message, extra=fields)
    else:
        print(f"noetl {role}: {message}", file=sys.stderr)


def _refuse(command: str, message: str) -> None:
    """A refusal before logging is set up: a JSON line for the services when logs are JSON."""
    from noetl.host.logs import log_format

    if command in ("server", "worker") and log_format() == "json":
        from datetime import UTC, datetime

        line = {"event": message, "level": "error", "logger": f"noetl.{command}"}
        line["timestamp"] = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        print(json.dumps(line), file=sys.stderr)
    else:
        print(f"noetl {command}: {message}", file=sys.stderr)


def _payload(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as e:
        raise SystemExit(f"noetl: --payload is not JSON: {e}") from e
    if not isinstance(value, dict):
        raise SystemExit("noetl: --payload must be a JSON object")
    return value


def _setup_logging(verbose: bool, command: str = "") -> None:
    """Long-running services log at INFO; one-shot commands only warn (their output is the result)."""
    from noetl.events.settings import setting
    from noetl.host.logs import configure

    default = "DEBUG" if verbose else ("INFO" if command in ("server", "worker") else "WARNING")
    configure(setting("log_level") or default)


class Interrupted(KeyboardInterrupt):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def signals_interrupt(*signums: int) -> Iterator[None]:
    """These signals end the run the way Ctrl-C does: their default action kills the process at
    once, leaving `noetl run`'s private nats-server running and its store directory behind."""

    def interrupt(signum: int, _frame: object) -> None:
        raise Interrupted(signum)

    previous = {signum: signal.signal(signum, interrupt) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def cmd_run(args: argparse.Namespace) -> int:
    from noetl.cli.embedded import run_embedded
    from noetl.cli.output import summary
    from noetl.dsl import validate_text
    from noetl.dsl.errors import DeploymentError, PlaybookInvalidError, TimeoutError_

    path = Path(args.file)
    try:
        text = path.read_text()
    except OSError as e:
        print(f"{args.file}:0: <file>: cannot read: {e.strerror}", file=sys.stderr)
        return 2
    problems = validate_text(text, str(path))
    if problems:
        for p in problems:
            print(p, file=sys.stderr)
        if args.json:
            print(
                json.dumps(
                    {
                        "status": "invalid",
                        "error": PlaybookInvalidError(problems).to_dict(),
                    }
                )
            )
        return 2
    from noetl.host.natsserver import sync_interval_setting

    try:  # the embedded nats-server's fsync interval (docs/guarantees.md)
        from noetl.events.settings import setting

        sync_interval_setting(setting("nats_sync_interval"))
    except ValueError as e:
        print(f"noetl run: {e}", file=sys.stderr)
        return 2
    print(f"noetl: running {path} on an embedded NATS server", file=sys.stderr)
    from noetl.cli.progress import Progress, wanted

    # what tasks print always reaches stderr; the live view only a person at a terminal
    progress = Progress(sys.stderr, live=wanted(args.json))
    from noetl.events import tracing

    tracing.configure_from_env("noetl-run")  # OTEL_EXPORTER_OTLP_ENDPOINT: the run's trace too
    try:
        with signals_interrupt(signal.SIGTERM, signal.SIGHUP):
            out = asyncio.run(
                run_embedded(
                    text,
                    str(path),
                    _payload(args.payload),
                    credentials_file=args.credentials,
                    catalog_dir=args.catalog,
                    timeout=args.timeout,
                    ui=getattr(args, "ui", False),
                    progress=progress,
                )
            )
    except KeyboardInterrupt as e:
        signum = e.signum if isinstance(e, Interrupted) else signal.SIGINT
        print(f"noetl: interrupted ({signal.Signals(signum).name})", file=sys.stderr)
        return 128 + signum
    except DeploymentError as e:  # the nats-server found cannot run NoETL (too old)
        print(f"noetl run: {e.message}", file=sys.stderr)
        return 2
    except TimeoutError:
        print(f"noetl: the execution did not finish within --timeout {args.timeout} s", file=sys.stderr)
        if args.json:
            err = TimeoutError_(f"no workflow.finished within {args.timeout} s").to_dict()
            print(json.dumps({"status": "failed", "error": err}))
        return 1
    finally:
        tracing.shutdown()  # the run's spans are flushed before the process ends
    if args.json:
        print(json.dumps(out, default=str))
    else:
        print(summary(out, str(path), text))
    return 0 if out["status"] == "success" else 1


def cmd_validate(args: argparse.Namespace) -> int:
    from noetl.cli.validate_cmd import cmd_validate as run

    return run(args.files, args.json)


def cmd_schema(args: argparse.Namespace) -> int:
    from noetl.cli.validate_cmd import cmd_schema as run

    return run(args.out, kinds=args.kinds)


async def _serve(args: argparse.Namespace, role: str) -> None:
    """Run until SIGTERM or SIGINT. The handlers go in first: a process stopped while it still
    starts (waiting for NATS, a cluster electing) stops cleanly with exit code 0 too."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    nc: Any = None
    svc: Any = None
    ops: Any = None
    listener: Any = None
    ops_http: Any = None
    from noetl.events.settings import setting

    async def start() -> None:
        """The HTTP port first (the server's probes say what is wrong while NATS is not
        reached), then NATS, waited for as long as it takes and logged while it fails, then the
        check that this nats-server can run NoETL, then the service."""
        nonlocal nc, svc, ops, listener, ops_http
        from noetl.events.bus import connect
        from noetl.events.connection import ConnectionState, check_server, redact_urls

        where = redact_urls(args.nats_url)
        state = ConnectionState(where)
        http_port = args.http_port
        if role == "server" and http_port >= 0:
            from noetl.server.api.listener import HttpListener
            from noetl.server.api.server import api_tokens, check_exposure
            from noetl.store.principals import Principals

            host = args.http_host
            insecure = bool(getattr(args, "insecure", False)) or bool(setting("api_insecure"))
            # the principals (tokens, the auth file) are read before the port opens: a bad auth
            # file stops the start here, and principals count as the API's token
            token, admin_token = api_tokens()
            principals = Principals.load(token, admin_token, getattr(args, "auth_file", None))
            check_exposure(host, token or ("principals" if principals.required else None), insecure)
            listener = HttpListener(host, http_port, state)
            await listener.start()
            _say(
                role,
                f"/health and /ready on {listener.url} (the API follows once NATS is reached)",
                url=listener.url,
            )
        if role == "worker" and http_port >= 0:  # probes before NATS, as the server's
            from noetl.worker.http import WorkerHttp

            ops_http = WorkerHttp(None, state, host=args.http_host, port=http_port, pool=args.pool)
            await ops_http.start()
            _say(role, f"/health, /ready and /metrics on {ops_http.url}", url=ops_http.url)
        nc = await connect(args.nats_url, name=f"noetl-{role}", state=state)
        await check_server(nc, role)
        if role == "server":
            from noetl.server.service import Server

            svc = Server(nc, partitions=args.partitions, replicas=args.replicas)
        else:
            from noetl.worker.service import Worker

            svc = Worker(nc, pool=args.pool, concurrency=args.concurrency, replicas=args.replicas)
        await svc.start()
        if ops_http is not None:
            ops_http.attach(svc)
        from noetl.server.api.launch import start_operations

        ops = await start_operations(
            nc,
            role,
            svc,
            http_host=args.http_host,
            http_port=http_port if role == "server" else -1,
            insecure=True if getattr(args, "insecure", False) or setting("api_insecure") else None,
            auth_file=getattr(args, "auth_file", None),
            listener=listener,
        )
        _settle_heap()
        _say(role, f"running against {where}", nats=where)
        if ops.api is not None:
            _say(role, f"HTTP API on {ops.api.url}", url=ops.api.url)

    from noetl.events import tracing

    tracing.configure_from_env(f"noetl-{role}")  # OTEL_EXPORTER_OTLP_ENDPOINT: spans over OTLP
    starting = asyncio.create_task(start())
    stopping = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if starting.done():
            starting.result()  # a start-up error (DeploymentError) ends the process here
            await stopping
        else:
            starting.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await starting
    finally:  # also after a start-up error: the service's loops must not outlive it
        stopping.cancel()
        if ops is not None:
            await ops.stop()
        if ops_http is not None:
            await ops_http.stop()
        if listener is not None:
            await listener.stop()
        if svc is not None:
            with contextlib.suppress(Exception):
                await svc.stop()
        if nc is not None:
            try:
                await asyncio.wait_for(nc.drain(), timeout=10)
            except Exception:  # a subscription stopped mid-fetch can hold drain forever: exit anyway
                await nc.close()
        tracing.shutdown()  # the last spans are flushed


def _settle_heap() -> None:
    """Once started: what start-up allocated (modules, the playbook cache's first entries,
    connections) leaves the collector's view (``gc.freeze``), so a full collection walks only
    what the work allocates; and a young generation of 50 000 objects instead of 700, so a busy
    service collects every few thousand messages instead of every few dozen."""
    from noetl.events.settings import setting

    if setting("gc_tune"):
        import gc

        gc.collect()
        gc.freeze()
        gc.set_threshold(50_000, 20, 20)


def _event_loop_run(main: Any) -> None:
    """``asyncio.run``, on uvloop when ``NOETL_UVLOOP`` is true and it is installed (measured, not
    the default: the fault matrix runs on asyncio's own loop)."""
    from noetl.events.settings import setting

    if setting("uvloop"):
        try:
            import uvloop
        except ImportError:
            pass
        else:
            uvloop.run(main)
            return
    asyncio.run(main)


def _run_service(args: argparse.Namespace, role: str) -> int:
    """Every setting is checked before anything starts: a service with one bad value (anywhere
    in its environment or file) refuses to start with one line naming it, rather than failing
    later, when the code that reads it first runs."""
    from noetl.dsl.errors import DeploymentError
    from noetl.events.settings import setting, settings

    try:
        settings()
        port_setting = "http_port" if role == "server" else "worker_http_port"
        args.http_port = setting(port_setting, args.http_port)
        args.http_host = setting("http_host", getattr(args, "http_host", None))
        if role == "server":
            args.partitions = setting("partitions", args.partitions)
        args.replicas = setting("replicas", args.replicas)
        _event_loop_run(_serve(args, role))
    except DeploymentError as e:
        _refuse(role, e.message)
        return 2
    except Exception:  # a bug: its traceback as one log record (JSON lines stay JSON lines)
        import logging

        logging.getLogger(f"noetl.{role}").exception("stopped by an unexpected error")
        return 1
    return 0


def cmd_server(args: argparse.Namespace) -> int:
    return _run_service(args, "server")


def cmd_worker(args: argparse.Namespace) -> int:
    return _run_service(args, "worker")


def _default(name: str) -> Any:
    """A flag's default from the settings, or None while the setting is bad: the command that
    uses it reads it again and refuses it then (``noetl validate`` never needs NOETL_HTTP_PORT)."""
    from noetl.events.settings import SettingsError, setting

    try:
        return setting(name)
    except SettingsError:
        return None


def _add_replicas(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--replicas",
        type=int,
        default=_default("replicas"),
        help="copies of every stream, KV bucket and object store (NOETL_REPLICAS): the JetStream "
        "cluster's size, e.g. 3; existing ones are changed to it. Unset: created with 1, left as they are",
    )


async def _exec(args: argparse.Namespace) -> dict[str, Any]:
    import uuid

    from noetl.cli.progress import Progress, run_with_progress, wanted
    from noetl.cli.session import cli_connect
    from noetl.client.run import submit

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
            await _warn_unserved_pools(nc, req["playbook"], args.file)
        if args.wait:  # live progress on a terminal; task output stays in `noetl logs` otherwise
            live = Progress(sys.stderr, live=True) if wanted(args.json) else None
            return await run_with_progress(nc, req, args.timeout, live)
        return {"execution_id": await submit(nc.jetstream(), req)}
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


async def _warn_unserved_pools(nc: Any, text: str, file: str) -> None:
    from noetl.cli.pools import playbook_pools, unserved_message, unserved_pools
    from noetl.dsl.cache import parse_playbook

    try:
        pools = playbook_pools(parse_playbook(text, file))
        missing = await unserved_pools(nc, pools)
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
    """``noetl catalog register|list`` with ``NOETL_TOKEN``: through the checked NATS service."""
    from noetl.cli.as_principal import call_service, service_error

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
    from noetl.events.streams import ensure_all
    from noetl.store.catalog import Catalog

    nc = await cli_connect(args.nats_url, "noetl-catalog")
    try:
        from noetl.cli.as_principal import principal_token

        if principal_token() and args.action in ("register", "list"):
            return await _catalog_as_principal(nc, args)
        js = nc.jetstream()
        await ensure_all(js)
        cat = await Catalog.open(js)
        if args.action == "register":
            from noetl.cli.ops_cmd import nats_identity
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


def build_parser() -> argparse.ArgumentParser:
    from noetl.events.settings import CONFIG_ENV, help_text, setting

    ap = argparse.ArgumentParser(
        prog="noetl",
        description="NoETL playbooks on NATS JetStream",
        epilog=help_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    ap.add_argument("--version", action="version", version=f"noetl {version()}")
    ap.add_argument(
        "--config",
        metavar="FILE",
        default=setting("config"),
        help=f"a YAML or JSON file of settings ({CONFIG_ENV}); the environment and flags win over it",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    nats_url = _default("nats_url") or "nats://127.0.0.1:4222"

    p = sub.add_parser("run", help="run a playbook on an embedded NATS server")
    p.add_argument("file")
    p.add_argument("--payload", help="request payload (JSON object), merged over workload")
    p.add_argument("--credentials", help="YAML file: name: {kind, data}")
    p.add_argument("--catalog", help="directory of playbooks for kind: playbook")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.add_argument("--timeout", type=float, default=None, help="give up after this many seconds")
    p.add_argument(
        "--ui",
        action="store_true",
        help="serve the web console on 127.0.0.1 (URL on stderr) and keep it up after the run until Ctrl-C",
    )
    p.set_defaults(fn=cmd_run)

    p = sub.add_parser("validate", help="check playbooks; exit 2 with every problem")
    p.add_argument("files", nargs="+")
    p.add_argument("--json", action="store_true", help="print the problems as JSON")
    p.set_defaults(fn=cmd_validate)

    p = sub.add_parser("schema", help="print the playbook JSON Schema")
    p.add_argument("-o", "--out", help="write the schema here (default: stdout)")
    p.add_argument(
        "--kinds", action="store_true", help="print the task kinds' field reference (Markdown) instead"
    )
    p.set_defaults(fn=cmd_schema)

    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("server", help="run the control plane", epilog=help_text(), formatter_class=raw)
    p.add_argument("--nats-url", default=nats_url, help="NATS URL, or a comma-separated list of a cluster's")
    p.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="partitions of the event log, split between server replicas (NOETL_PARTITIONS); fixed "
        "when the log is first used (default 8), later only that count is accepted",
    )
    _add_replicas(p)
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="HTTP API port (NOETL_HTTP_PORT, default 8080); 0 picks a free one (logged), -1: no API",
    )
    p.add_argument("--http-host", default=None, help="HTTP API address (NOETL_HTTP_HOST, default 127.0.0.1)")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="serve the HTTP API on a non-loopback address without NOETL_API_TOKEN (a trusted network only)",
    )
    p.add_argument(
        "--auth-file",
        default=None,  # NOETL_AUTH_FILE (the settings), read by Principals.load
        help="the principals: name, token or token_sha256, role, namespaces (NOETL_AUTH_FILE)",
    )
    p.set_defaults(fn=cmd_server)

    p = sub.add_parser("worker", help="run a worker for a pool", epilog=help_text(), formatter_class=raw)
    p.add_argument("--nats-url", default=nats_url, help="NATS URL, or a comma-separated list of a cluster's")
    _add_replicas(p)
    p.add_argument(
        "--pool", default="default", help="the pool whose commands it runs (noetl.commands.<pool>)"
    )
    p.add_argument("--concurrency", type=int, default=16, help="commands run at once")
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="port of /health, /ready and /metrics (NOETL_WORKER_HTTP_PORT); 0 picks a free one, "
        "-1 (the default) serves none",
    )
    p.add_argument("--http-host", default=None, help="their address (NOETL_HTTP_HOST, default 127.0.0.1)")
    p.set_defaults(fn=cmd_worker)

    p = sub.add_parser("exec", help="publish an execution request")
    p.add_argument("file", nargs="?")
    p.add_argument("--path", help="a catalog playbook's path (instead of FILE)")
    p.add_argument("--version", help="the catalog version (default: latest)")
    p.add_argument("--payload", help="request payload (JSON object), merged over workload")
    p.add_argument("--request-id", help="idempotency key: the same id starts one execution (default: random)")
    p.add_argument("--nats-url", default=nats_url, help="NATS URL, or a comma-separated list of a cluster's")
    p.add_argument(
        "--wait", action="store_true", help="wait for the execution to finish and print its outcome"
    )
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--timeout", type=float, help="give up after this many seconds (--wait: default none)")
    p.set_defaults(fn=cmd_exec)

    p = sub.add_parser("catalog", help="register, list or show playbooks in the catalog")
    p.add_argument("action", choices=["register", "list", "show"])
    p.add_argument("files", nargs="*")
    p.add_argument("--version", help="the version to show (default: latest)")
    p.add_argument("--nats-url", default=nats_url, help="NATS URL, or a comma-separated list of a cluster's")
    p.set_defaults(fn=cmd_catalog)

    from noetl.cli import ops_cmd

    ops_cmd.add_parsers(sub, nats_url)
    from noetl.cli import outside_cmd

    outside_cmd.add_parsers(sub, nats_url)
    from noetl.cli import rerun_cmd

    rerun_cmd.add_parsers(sub, nats_url)
    from noetl.cli.analysis_cmd import add_parsers

    add_parsers(sub, nats_url)
    _verbose_anywhere(ap)
    return ap


def _verbose_anywhere(parser: argparse.ArgumentParser) -> None:
    """``-v`` before or after the subcommand (``noetl run FILE -v``, as the quickstart shows): each
    subcommand accepts it too; SUPPRESS keeps the top-level value when it is not given there."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if not any("-v" in a.option_strings for a in sub._actions):
                    sub.add_argument(
                        "-v",
                        "--verbose",
                        action="store_true",
                        default=argparse.SUPPRESS,
                        help="log to stderr",
                    )
                _verbose_anywhere(sub)


def version() -> str:
    """The installed distribution's version (the wheel's metadata), else the source tree's."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("noetl-jetstream")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    from noetl.events.settings import CONFIG_ENV, SettingsError

    args = build_parser().parse_args(argv)
    if args.config:  # the file is a source of every setting read from here on
        os.environ[CONFIG_ENV] = args.config
    try:
        _setup_logging(args.verbose, args.command)
        return int(args.fn(args) or 0)
    except SettingsError as e:
        _refuse(args.command, e.message)
        return 2


if __name__ == "__main__":
    sys.exit(main())
