"""`noetl check`, `noetl migrate`, `noetl graph`, `noetl test` and `noetl replay`.

Exit codes (each command's page in docs/ repeats them):

    check    0 clean or warnings only (1 with --strict), 1 errors found, 2 a file is invalid
    compile  0 the compiled playbook is valid, 2 it is not (or the sugar itself is wrong)
    migrate  0 the output is a valid v10 playbook, 1 it is written but still invalid, 2 unreadable input,
             or an upstream NoETL playbook with a construct that has no translation (nothing written)
    graph    0 drawn, 1 the execution has no events, 2 the playbook is invalid, is not the one the
             execution ran, or (without FILE) its text is nowhere to be found
    test     0 every case passed, 1 a case failed, 2 the folder holds no case
    replay   0 no divergence, 1 divergence found, 2 no such execution or an invalid new playbook

Findings and problems use the `file:line: ...` form editors and CI annotators parse; results go to
stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any


def _read(file: str) -> str | None:
    # imported here: this module is loaded to build every command's parser, and the validator
    # (~90 ms with pydantic) is needed by its commands only
    from noetl.dsl.validate import read_text

    text, problem = read_text(file)
    if problem is not None:
        print(problem, file=sys.stderr)
    return text


# --- check ---------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from noetl.dsl.analysis import check_text

    invalid = errors = warnings = hints = 0
    report: list[dict[str, Any]] = []
    for file in args.files:
        text = _read(file)
        if text is None:
            invalid += 1
            continue
        result = check_text(text, file)
        if result.problems:
            from noetl.dsl.migrate import upstream_hint

            hint = upstream_hint(text, file)
            result.problems = [hint] if hint is not None else result.problems
            result.findings = [] if hint is not None else result.findings
        invalid += bool(result.problems)
        errors += len(result.errors)
        warnings += len(result.warnings)
        hints += len(result.hints)
        if args.json:
            report.append(
                {
                    "file": file,
                    "problems": [p.to_dict() for p in result.problems],
                    "findings": [f.to_dict() for f in result.findings],
                }
            )
            continue
        for p in result.problems:
            print(p)
        for f in result.findings:
            print(f)
        if not result.problems and not result.errors and not result.warnings:
            print(f"{file}: clean" + (f" ({len(result.hints)} hints)" if result.hints else ""))
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{errors} errors, {warnings} warnings, {hints} hints, {invalid} invalid files", file=sys.stderr
        )
    if invalid:
        return 2
    return 1 if errors or (args.strict and warnings) else 0


# --- migrate -------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    """Exit 2 also when an upstream playbook has a construct with no translation: a half-migrated
    upstream playbook would run with a different meaning, so it is refused, naming each construct."""
    from noetl.dsl.migrate import migrate_text

    text = _read(args.file)
    if text is None:
        return 2
    result = migrate_text(text, args.file, sugar=args.sugar, dialect=args.dialect)
    if result.text is None:
        for p in result.problems:
            print(p, file=sys.stderr)
        return 2
    done = sum(not n.untranslated for n in result.notes)
    left = sum(n.untranslated for n in result.notes)
    if result.refused:
        for note in result.notes if args.report else result.untranslated:
            print(note, file=sys.stderr)
        print(
            f"{args.file}: not migrated: {left} upstream constructs have no translation here (each is named "
            "above with what to do); nothing was written",
            file=sys.stderr,
        )
        return 2
    if args.out:
        Path(args.out).write_text(result.text, encoding="utf-8")
    else:
        sys.stdout.write(result.text)
    # upstream rewrites are many: --report lists them
    quiet = result.dialect == "upstream" and not args.report
    for note in result.untranslated if quiet else result.notes:
        print(note, file=sys.stderr)
    for p in result.problems:
        print(f"{p} (in the migrated output)", file=sys.stderr)
    verdict = "valid v10 playbook" if not result.problems else f"{len(result.problems)} problems left"
    where = f" to {args.out}" if args.out else ""
    source = " (upstream NoETL dialect)" if result.dialect == "upstream" else ""
    hint = "; --report lists them" if quiet and done else ""
    print(
        f"migrated {args.file}{source}{where}: {done} rewrites{hint}, {left} not translated, {verdict}",
        file=sys.stderr,
    )
    return 1 if result.problems else 0


# --- compile -------------------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    """The canonical playbook the engine runs: the sugar (choose/while/until) compiled away, with
    the debug map that says which sugar each generated task stands for."""
    from noetl.dsl.sugar import compile_text, render
    from noetl.dsl.validate import validate_text

    text = _read(args.file)
    if text is None:
        return 2
    compiled = compile_text(text, args.file)
    problems = compiled.problems or validate_text(text, args.file)
    if compiled.data is None or compiled.problems:
        for p in problems:
            print(p, file=sys.stderr)
        return 2
    if args.json:
        out = json.dumps(
            {
                "playbook": compiled.data,
                "debug_map": [d.to_dict() for d in compiled.debug],
                "problems": [p.to_dict() for p in problems],
            },
            indent=2,
        )
        out += "\n"
    else:
        out = render(compiled, args.file)
    if args.out:
        Path(args.out).write_text(out, encoding="utf-8")
    else:
        sys.stdout.write(out)
    for p in problems:
        print(p, file=sys.stderr)
    return 2 if problems else 0


# --- graph, test, replay -------------------------------------------------------------------


def cmd_graph(args: argparse.Namespace) -> int:
    from noetl.cli.analysis_run import graph

    return asyncio.run(graph(args))


def cmd_test(args: argparse.Namespace) -> int:
    from noetl.cli.suite import run_suite

    return asyncio.run(run_suite(args))


def cmd_replay(args: argparse.Namespace) -> int:
    from noetl.cli.analysis_run import replay

    return asyncio.run(replay(args))


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_url_default: str) -> None:
    """The analysis commands, in two groups: those that read only a file, and those that run or
    read executions."""
    _add_file_parsers(sub)
    _add_execution_parsers(sub, nats_url_default)


def _add_file_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "check", help="static analysis: dead arcs, joins that never admit, unbounded cycles..."
    )
    p.add_argument("files", nargs="+")
    p.add_argument("--json", action="store_true", help="print problems and findings as JSON")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.set_defaults(fn=cmd_check)

    p = sub.add_parser("migrate", help="rewrite an older draft's constructs into the v10 DSL")
    p.add_argument("file")
    p.add_argument("-o", "--out", help="write the migrated playbook here (default: stdout)")
    p.add_argument(
        "--sugar",
        action="store_true",
        help="write a task `when` as a `choose` (authoring sugar) instead of the canonical gate task",
    )
    p.add_argument(
        "--from",
        dest="dialect",
        choices=("auto", "drafts", "upstream"),
        default="auto",
        help="what FILE is written in: upstream NoETL's dialect, the older drafts, or auto (decided by "
        "the constructs only upstream writes)",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="list every rewrite on stderr, one a line with its line in FILE (upstream playbooks list "
        "only what could not be translated without it)",
    )
    p.set_defaults(fn=cmd_migrate)

    p = sub.add_parser(
        "compile",
        help="print the canonical playbook (sugar compiled to tasks) with its debug map",
        description="Compile choose/while/until into canonical tasks and print the playbook the engine "
        "runs, followed by the debug map (each generated task and the sugar line it came from). "
        "Exit 0 when the compiled playbook is valid, 2 otherwise (problems on stderr).",
    )
    p.add_argument("file")
    p.add_argument("-o", "--out", help="write the compiled playbook here (default: stdout)")
    p.add_argument("--json", action="store_true", help="print {playbook, debug_map, problems} as JSON")
    p.set_defaults(fn=cmd_compile)


def _add_execution_parsers(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], nats_url_default: str
) -> None:
    p = sub.add_parser(
        "graph",
        help="Mermaid flowchart of the playbook, optionally of one execution",
        description="Draw FILE's net, or with --execution/--events one execution on it. FILE must be "
        "the playbook the execution ran (compared by digest; exit 2 otherwise); without FILE the "
        "execution's own playbook is drawn, as its events or the catalog recorded it.",
    )
    p.add_argument(
        "file", nargs="?", help="the playbook; optional with --execution or --events (the one the run used)"
    )
    p.add_argument(
        "--execution",
        help="colour arcs and annotate steps from this execution's events (read from NATS); FILE, when "
        "given, must be the playbook it ran",
    )
    p.add_argument("--events", help="read the execution from a `noetl run --json` output file instead")
    p.add_argument(
        "--nats-url", default=nats_url_default, help="NATS URL, or a comma-separated list of a cluster's"
    )
    p.add_argument("-o", "--out", help="write the Mermaid text here (default: stdout)")
    p.set_defaults(fn=cmd_graph)

    p = sub.add_parser("test", help="run a folder of playbooks against their .expect.yaml, with coverage")
    p.add_argument("dir")
    p.add_argument("--credentials", help="YAML file: name: {kind, data}")
    p.add_argument("--catalog", help="directory of playbooks for kind: playbook (default: DIR/lib)")
    p.add_argument("--api-url", help="payload api_url for cases marked uses_api (skipped without it)")
    p.add_argument("--only", help="run only cases whose name contains this text")
    p.add_argument("--json", action="store_true", help="print the results and the coverage as JSON")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per case")
    p.set_defaults(fn=cmd_test)

    p = sub.add_parser("replay", help="fold a recorded execution through the engine and diff the decisions")
    p.add_argument("execution_id")
    p.add_argument("--playbook", help="replay against this new version of the playbook")
    p.add_argument(
        "--nats-url", default=nats_url_default, help="NATS URL, or a comma-separated list of a cluster's"
    )
    p.add_argument("--json", action="store_true", help="print the comparison as JSON")
    p.set_defaults(fn=cmd_replay)
