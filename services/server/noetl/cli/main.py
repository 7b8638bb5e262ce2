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

from noetl.cli.parser import build_parser as build_parser  # re-exported: tests and tools import it from here


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
    """``noetl run``: the playbook validated, then run on a private NATS of its own."""
    from noetl.cli import heap

    heap.hold()  # released once the private server and worker run (noetl.cli.heap)
    nats = _launch_nats()
    try:
        # a SIGTERM/SIGHUP while it validates still ends the process by that signal, but not
        # before the nats-server launched early, in a session of its own, is stopped
        with signals_interrupt(signal.SIGTERM, signal.SIGHUP):
            return _run(args, nats)
    except Interrupted as e:
        if nats is not None:
            nats.stop()
        signal.signal(e.signum, signal.SIG_DFL)
        os.kill(os.getpid(), e.signum)
        raise
    finally:
        if nats is not None:
            nats.stop()  # a run that ended before using it (already stopped: nothing more)
        heap.release()


def _launch_nats() -> Any:
    """The private nats-server launched before anything else, so it boots (~10-25 ms) while the
    run imports and validates; None when it cannot be, and the run starts one where it always
    did, which then reports the reason in its usual place and order."""
    try:
        from noetl.host.natsserver import NatsServer

        server = NatsServer()
    except Exception:
        return None
    try:
        return server.launch()
    except Exception:
        server.stop()
        return None


def _run(args: argparse.Namespace, nats: Any) -> int:
    read = _read_valid(args)
    if isinstance(read, int):
        return read
    path, text = read
    from noetl.host.natsserver import sync_interval_setting

    try:  # the embedded nats-server's fsync interval (docs/guarantees.md)
        from noetl.events.settings import setting

        sync_interval_setting(setting("nats_sync_interval"))
    except ValueError as e:
        print(f"noetl run: {e}", file=sys.stderr)
        return 2
    print(f"noetl: running {path} on an embedded NATS server", file=sys.stderr)
    out = _run_embedded(args, path, text, nats)
    if isinstance(out, int):
        return out
    from noetl.cli.output import summary

    print(json.dumps(out, default=str) if args.json else summary(out, str(path), text))
    return 0 if out["status"] == "success" else 1


def _read_valid(args: argparse.Namespace) -> tuple[Path, str] | int:
    """The playbook's path and text, or the exit code after saying why it cannot run (2)."""
    from noetl.dsl import validate_text
    from noetl.dsl.errors import PlaybookInvalidError

    path = Path(args.file)
    try:
        text = path.read_text()
    except OSError as e:
        print(f"{args.file}:0: <file>: cannot read: {e.strerror}", file=sys.stderr)
        return 2
    problems = validate_text(text, str(path))
    if not problems:
        return path, text
    for p in problems:
        print(p, file=sys.stderr)
    if args.json:
        print(json.dumps({"status": "invalid", "error": PlaybookInvalidError(problems).to_dict()}))
    return 2


def _run_embedded(args: argparse.Namespace, path: Path, text: str, nats: Any = None) -> dict[str, Any] | int:
    """The execution's output, or the exit code of a run that did not end (interrupted: 128 +
    the signal; a nats-server that cannot run NoETL: 2; past ``--timeout``: 1)."""
    from noetl.cli.embedded import run_embedded
    from noetl.cli.progress import Progress, wanted
    from noetl.dsl.errors import DeploymentError, TimeoutError_
    from noetl.events import tracing

    # what tasks print always reaches stderr; the live view only a person at a terminal
    progress = Progress(sys.stderr, live=wanted(args.json))
    tracing.configure_from_env("noetl-run")  # OTEL_EXPORTER_OTLP_ENDPOINT: the run's trace too
    try:
        with signals_interrupt(signal.SIGTERM, signal.SIGHUP):
            return asyncio.run(
                run_embedded(
                    text,
                    str(path),
                    _payload(args.payload),
                    credentials_file=args.credentials,
                    catalog_dir=args.catalog,
                    timeout=args.timeout,
                    ui=getattr(args, "ui", False),
                    progress=progress,
                    nats=nats,
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


def cmd_validate(args: argparse.Namespace) -> int:
    from noetl.cli.validate_cmd import cmd_validate as run

    return run(args.files, args.json)


def cmd_schema(args: argparse.Namespace) -> int:
    from noetl.cli.validate_cmd import cmd_schema as run

    return run(args.out, kinds=args.kinds)


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
        from noetl.cli.serve import serve

        _event_loop_run(serve(args, role, _say))
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
