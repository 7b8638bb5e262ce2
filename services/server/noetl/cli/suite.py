"""`noetl test DIR`: run a folder of playbooks against their expectations, with arc coverage.

Each `NAME.yaml` with a `NAME.expect.yaml` beside it is a case (the conformance format); playbooks
under `DIR/lib` are registered in the catalog for `kind: playbook`. All cases run on one private
nats-server with one server and one worker (the embedded runner's setup, started once instead
of once per case). After the runs, every arc that never fired and every task that never ran in
any case's execution is listed per playbook: the part of the net the suite does not exercise.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from noetl.cli.expect import NOT_CHECKED, compare
from noetl.dsl.analysis.coverage import Coverage, coverage, trace
from noetl.dsl.validate import load_playbook, validate_text


@dataclass
class CaseResult:
    name: str
    verdict: str  # PASS | FAIL | SKIP
    problems: list[str] = field(default_factory=list)
    coverage: Coverage | None = None


def discover(directory: Path, only: str | None) -> list[tuple[str, Path, dict[str, Any]]]:
    cases = []
    for expect in sorted(directory.glob("*.expect.yaml")):
        name = expect.name[: -len(".expect.yaml")]
        playbook = directory / f"{name}.yaml"
        if playbook.is_file() and (only is None or only in name):
            cases.append((name, playbook, yaml.safe_load(expect.read_text()) or {}))
    return cases


def _invalid_case(name: str, text: str, file: str, exp: dict[str, Any]) -> CaseResult:
    problems = validate_text(text, file)
    if not problems:
        return CaseResult(name, "FAIL", ["the playbook is valid, expected validation to reject it"])
    shown = "\n".join(str(p) for p in problems).replace(file, "").lower()
    missing = [
        f"validation message lacks {n!r}" for n in exp.get("error_contains") or [] if n.lower() not in shown
    ]
    return CaseResult(name, "FAIL" if missing else "PASS", missing)


class _Env:
    """One private nats-server with a server and a worker, for every case of the run."""

    async def __aenter__(self) -> _Env:
        from noetl.events.bus import connect
        from noetl.events.nats_port import NatsBus
        from noetl.events.streams import ensure_all
        from noetl.host.natsserver import NatsServer

        self.ns = NatsServer().start()
        self.nc = await connect(self.ns.url, name="noetl-test")
        await ensure_all(self.nc.jetstream())
        self.bus = NatsBus(self.nc)  # the one adapter the suite's server, worker and runs share
        self.services: list[Any] = []
        return self

    async def start(self, credentials: str | None, catalog: str | None) -> None:
        from noetl.cli.embedded import register_catalog_dir
        from noetl.server.service import Server
        from noetl.store.catalog import Catalog
        from noetl.store.credentials import CredentialStore, generate_key, load_credentials_file
        from noetl.worker.service import Worker

        creds = await CredentialStore.open(self.bus, generate_key())
        for name, entry in (load_credentials_file(credentials) if credentials else {}).items():
            await creds.put(name, entry.get("kind", "secret"), entry.get("data") or {})
        if catalog and Path(catalog).is_dir():
            await register_catalog_dir(await Catalog.open(self.bus), catalog)
        self.server = Server(self.bus, credentials=creds)
        self.worker = Worker(self.bus, credentials=creds, concurrency=32)
        await self.server.start()
        self.services.append(self.server.stop)
        await self.worker.start()
        self.services.append(lambda: self.worker.stop(drain=False))

    async def run(self, text: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        from noetl.client.run import run_and_wait

        request = {"request_id": uuid.uuid4().hex, "playbook": text, "payload": payload}
        return await run_and_wait(self.bus, request, timeout=timeout)

    async def __aexit__(self, *exc: object) -> None:
        for stop in reversed(self.services):
            with contextlib.suppress(Exception):
                await stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.nc.close(), 2)
        self.ns.stop()


async def _run_case(
    env: _Env, name: str, file: Path, exp: dict[str, Any], args: argparse.Namespace
) -> CaseResult:
    text = file.read_text()
    if exp.get("invalid"):
        return _invalid_case(name, text, str(file), exp)
    if "postgres" in (exp.get("requires") or []):
        return CaseResult(name, "SKIP", ["needs PostgreSQL"])
    payload = dict(exp.get("payload") or {})
    if exp.get("uses_api"):
        if not args.api_url:
            return CaseResult(name, "SKIP", ["calls an API: pass --api-url"])
        payload["api_url"] = args.api_url
    problems = validate_text(text, str(file))
    if problems:
        return CaseResult(name, "FAIL", [str(p) for p in problems])
    try:
        out = await env.run(text, payload, float(exp.get("timeout", args.timeout)))
    except TimeoutError:
        return CaseResult(name, "FAIL", [f"no answer in {exp.get('timeout', args.timeout)} s"])
    found = compare(exp, out)
    cov = coverage(load_playbook(text, str(file)), [trace(out.get("events") or [])])
    unchecked = [k for k in NOT_CHECKED if k in exp]
    notes = (
        [f"not checked here: {', '.join(unchecked)} (the conformance runner's mock API)"] if unchecked else []
    )
    return CaseResult(name, "FAIL" if found else "PASS", found + notes, cov)


def _report(results: list[CaseResult]) -> str:
    lines = []
    for r in results:
        lines.append(f"{r.verdict} {r.name}" + (f": {'; '.join(r.problems)}" if r.problems else ""))
    covered = [r for r in results if r.coverage is not None]
    if covered:
        lines.append("")
        lines.append("coverage (arcs fired, tasks run):")
    for r in covered:
        c = r.coverage
        assert c is not None
        arcs = f"arcs {len(c.arcs) - len(c.missed_arcs)}/{len(c.arcs)}"
        tasks = f"tasks {len(c.tasks) - len(c.missed_tasks)}/{len(c.tasks)}"
        lines.append(f"  {r.name}: {arcs}, {tasks}")
        for step, k, to in c.missed_arcs:
            lines.append(f"    never fired: {step}.next.arcs[{k}] → {to}")
        for step, task in c.missed_tasks:
            lines.append(f"    never ran:   {step}.{task}")
    return "\n".join(lines)


async def run_suite(args: argparse.Namespace) -> int:
    directory = Path(args.dir)
    cases = discover(directory, args.only)
    if not cases:
        print(f"noetl: no case in {directory} (a case is NAME.yaml with NAME.expect.yaml)", file=sys.stderr)
        return 2
    results: list[CaseResult] = []
    async with _Env() as env:
        await env.start(args.credentials, args.catalog or str(directory / "lib"))
        for name, file, exp in cases:
            print(f"noetl test: {name}", file=sys.stderr)
            results.append(await _run_case(env, name, file, exp, args))
    counts = {v: sum(r.verdict == v for r in results) for v in ("PASS", "FAIL", "SKIP")}
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "name": r.name,
                        "verdict": r.verdict,
                        "problems": r.problems,
                        "coverage": r.coverage.to_dict() if r.coverage else None,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    else:
        print(_report(results))
    print(f"test: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 1 if counts["FAIL"] else 0
