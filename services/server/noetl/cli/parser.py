"""The `noetl` argument parser: every command, its options and the settings they default to."""

from __future__ import annotations

import argparse
from typing import Any


def _default(name: str) -> Any:
    """A flag's default from the settings, or None while the setting is bad: the command that
    uses it reads it again and refuses it then (``noetl validate`` never needs NOETL_HTTP_PORT)."""
    from noetl.events.settings import SettingsError, setting

    try:
        return setting(name)
    except SettingsError:
        return None


# an epilog that stands for the settings' table, written out only when help is shown
SETTINGS_HELP = "<the settings, NOETL_*>"


class _Parser(argparse.ArgumentParser):
    """Writes the settings' table into ``--help`` only when help is shown: the table comes from
    the settings model, whose import (pydantic) every command would otherwise pay on start-up."""

    def format_help(self) -> str:
        if self.epilog == SETTINGS_HELP:
            from noetl.events.settings_docs import help_text

            self.epilog = help_text()
        return super().format_help()


class _Version(argparse._VersionAction):
    """``--version``, asking the installed distribution's metadata only when given: reading it
    (``importlib.metadata``) cost every command ~10 ms of its start-up."""

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        from noetl.cli.main import version

        self.version = f"noetl {version()}"
        super().__call__(parser, *args, **kwargs)


def _add_replicas(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--replicas",
        type=int,
        default=_default("replicas"),
        help="copies of every stream, KV bucket and object store (NOETL_REPLICAS): the JetStream "
        "cluster's size, e.g. 3; existing ones are changed to it. Unset: created with 1, left as they are",
    )


def build_parser() -> argparse.ArgumentParser:
    """Every command's options: this module's commands in groups (a function each, in the order
    `noetl --help` lists them), then the command modules' own."""
    # the commands live in main (the start-up) and the command modules, which import this one
    from noetl.events.settings import CONFIG_ENV, setting

    ap: argparse.ArgumentParser = _Parser(
        prog="noetl",
        description="NoETL playbooks on NATS JetStream",
        epilog=SETTINGS_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="log to stderr")
    ap.add_argument("--version", action=_Version)
    ap.add_argument(
        "--config",
        metavar="FILE",
        default=setting("config"),
        help=f"a YAML or JSON file of settings ({CONFIG_ENV}); the environment and flags win over it",
    )
    sub = ap.add_subparsers(dest="command", required=True)
    nats_url = _default("nats_url") or "nats://127.0.0.1:4222"
    _add_local(sub)
    _add_server(sub, nats_url)
    _add_worker(sub, nats_url)
    _add_client(sub, nats_url)

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


def _add_local(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The commands that need no running services: run (embedded), validate, schema."""
    from noetl.cli.main import cmd_run, cmd_schema, cmd_validate

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


def _add_server(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_url: str) -> None:
    from noetl.cli.main import cmd_server
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("server", help="run the control plane", epilog=SETTINGS_HELP, formatter_class=raw)
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


def _add_worker(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_url: str) -> None:
    from noetl.cli.main import cmd_worker
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("worker", help="run a worker for a pool", epilog=SETTINGS_HELP, formatter_class=raw)
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


def _add_client(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_url: str) -> None:
    """The commands that talk to running services over NATS: exec, catalog."""
    from noetl.cli.exec_cmd import cmd_catalog, cmd_exec

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
