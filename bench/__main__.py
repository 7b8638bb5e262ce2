"""``python -m bench [--scenario NAME ...] [--runs N] [--quick]``: run, print the table, save it.

The floor always runs first, even when not asked for, because the engine's figures are judged
as multiples of it. The table goes to stdout, the raw values to ``bench/results/latest.json``,
and a full run (every scenario, not ``--quick``) also rewrites the table in
``docs/performance.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from datetime import UTC, datetime

from bench import report
from bench.config import FULL, QUICK
from bench.record import Recorder

SCENARIOS = [
    *["floor", "chain", "loop", "fanout", "startup", "one_step", "shapes", "io_loops", "ha", "peers"],
    "million",
]
ON_REQUEST = {"million"}  # long: only when named with --scenario


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("--scenario", action="append", choices=SCENARIOS, help="repeatable; default: all")
    ap.add_argument("--runs", type=int, help="repetitions per scenario (default 3; 1 with --quick)")
    ap.add_argument("--quick", action="store_true", help="small sizes, one run, no peers (~2 minutes)")
    ap.add_argument(
        "--fsync",
        action="store_true",
        help="shapes with fsync on: JetStream sync_interval always, Restate's default WAL fsync",
    )
    ap.add_argument(
        "--write-docs", action="store_true", help="update docs/performance.md even on a partial run"
    )
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    sizes = QUICK if args.quick else FULL
    runs = args.runs or (1 if args.quick else 3)
    chosen = args.scenario or [
        s for s in SCENARIOS if s not in ON_REQUEST and not (args.quick and s == "peers")
    ]
    if "floor" not in chosen:
        chosen = ["floor", *chosen]
    chosen = [s for s in SCENARIOS if s in chosen]
    if args.fsync:
        import os

        os.environ["NOETL_BENCH_FSYNC"] = "always"
    rec = Recorder()
    where = report.machine()  # before the run, so the load average is other people's
    t0 = time.monotonic()
    for name in chosen:
        mod = importlib.import_module(f"bench.{name}")
        print(f"bench: {name} ...", file=sys.stderr, flush=True)
        t = time.monotonic()
        try:
            asyncio.run(mod.run(rec, sizes, runs))
        except KeyboardInterrupt:
            raise
        except Exception as e:
            rec.note(name, f"failed: {type(e).__name__}: {e}")
        print(f"bench: {name} took {time.monotonic() - t:.1f} s", file=sys.stderr, flush=True)
    meta = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": where,
        "revision": report.revision(),
        "args": " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])]).strip(),
        "runs": runs,
        "quick": args.quick,
        "scenarios": chosen,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(report.render_text(rec))
    print(f"\nwrote {report.write_json(rec, meta)}", file=sys.stderr)
    full = not args.quick and args.scenario is None
    if (full or args.write_docs) and report.write_doc(rec, meta):
        print(f"wrote the table into {report.DOC}", file=sys.stderr)
    print(f"bench: {meta['seconds']} s in all", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
