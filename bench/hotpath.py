"""``python -m bench.hotpath``: where the server's and the worker's CPU goes in a parallel loop.

py-spy (installed on first use into ``bench/.peers/tools``) samples the ``noetl server`` and
``noetl worker`` processes while they run one loop; nats-server's ``/connz`` counts the messages
each connection sent per iteration, and the kernel's accounting gives each process's CPU time,
nats-server's included. Each sample is charged to the innermost *specific* activity
on its stack (JSON, spec merge, templates, KV, publish, ...), so an asyncio or socket frame
under ``KeyValue.put`` counts as KV; a sample under no specific activity is charged by its leaf
frame: a socket call, the epoll wait, asyncio's bookkeeping, nats-py's protocol code, or our own
code by file. Output: a Markdown
report on stdout and in ``bench/results/hotpath-<shape>.md``, the raw stacks beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from bench import playbooks
from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.peers import ensure_venv
from noetl.events.ids import execution_id_for

OUT = Path(__file__).resolve().parent / "results"

# (label, substrings of a frame "function (file:line)"); the first label whose substring is in
# the innermost matching frame wins
SPECIFIC: list[tuple[str, tuple[str, ...]]] = [
    ("JSON encode", ("(json/encoder.py", "dumps (events/envelope.py", "dumps (json/__init__.py")),
    ("JSON decode", ("(json/decoder.py", "loads (json/__init__.py", "loads (events/envelope.py")),
    ("spec merge (effective_*_spec)", ("(dsl/specmerge.py",)),
    (
        "templates (Jinja render)",
        ("(jinja2/", "(dsl/templates.py", "(dsl/template_env.py", "template_limits"),
    ),
    ("masking", ("(worker/masking.py",)),
    ("task policy evaluation", ("(dsl/policy.py",)),
    ("engine decide/fold", ("(engine/",)),
    ("event/id/timestamp building", ("(events/envelope.py", "(events/ids.py", "_now (", "(uuid.py")),
    ("nats-py KV get", ("KeyValue.",)),
    ("nats-py JetStream publish + ack", ("JetStreamContext.publish", "_handle_async_reply", "PubAck")),
    ("nats-py pull fetch", ("PullSubscription",)),
    ("nats-py msg ack/in_progress", ("Msg.ack", "Msg.in_progress", "Msg._ack")),
    ("nats-py msg metadata parse", ("Msg.metadata", "Metadata._from_reply")),
]
# when no specific activity is on the stack, the leaf decides: a socket call, the epoll wait, the
# event loop's own bookkeeping, nats-py's protocol code, or our own code (by file)
LEAF: list[tuple[str, tuple[str, ...]]] = [
    ("socket send/recv syscalls", ("_SelectorSocketTransport.write", "writelines (", "_read_ready")),
    ("epoll wait (partly idle: py-spy cannot always tell)", ("EpollSelector.select",)),
    ("nats-py protocol (read loop, parser, flusher)", ("(nats/",)),
    ("asyncio scheduling (tasks, futures, timers, queues)", ("(asyncio/", "(selectors.py")),
]
# inclusive: share of samples with such a frame anywhere on the stack
INCLUSIVE: list[tuple[str, str]] = [
    ("Worker._run_command (one command)", "Worker._run_command "),
    ("Pipeline.run (task loop)", "Pipeline.run "),
    ("Outbox.send (ordered publishes)", "Outbox.send "),
    ("Outbox.confirm (waiting for acks)", "Outbox.confirm "),
    ("Puller.fetch (reading commands or inputs)", "Puller.fetch "),
    ("KV get (worker: snapshot lookup on a redelivery)", "KeyValue.get "),
    ("effective_task_spec", "effective_task_spec "),
    ("effective_step_spec", "effective_step_spec "),
    ("Masker.mask", "Masker.mask "),
    ("template render", "render ("),
    ("envelope dumps", "dumps ("),
    ("loads", "loads ("),
    ("Server._process_batch (engine inputs)", "Server._process_batch "),
    ("RequestHandler.handle (execution requests)", "RequestHandler.handle "),
    ("load_playbook (YAML parse + validation)", "load_playbook ("),
    ("Catalog.put_digest (playbook text to KV)", "put_digest ("),
    ("engine decide", "decide (engine/"),
    ("msg.metadata", "Msg.metadata "),
    ("asyncio.wait_for (publish/request time-outs)", "wait_for (asyncio/"),
    ("loop.call_later/call_at (timers)", "call_at ("),
]


def classify(frames: list[str]) -> str:
    for frame in reversed(frames):
        for label, needles in SPECIFIC:
            if any(n in frame for n in needles):
                if label.startswith("JSON") and any("(nats/" in f for f in frames):
                    return f"{label} in nats-py (acks, API replies)"
                return label
    leaf = frames[-1] if frames else "?"
    for label, needles in LEAF:
        if any(n in leaf for n in needles):
            return label
    m = re.search(r"\(([^:)]+)", leaf)
    return f"code in {m.group(1) if m else leaf}"


def analyze(raw: str) -> tuple[int, Counter[str], Counter[str]]:
    """(samples, self by category, inclusive by operation) of a py-spy ``raw`` (collapsed) file."""
    total, cats, incl = 0, Counter[str](), Counter[str]()
    for line in raw.splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        frames = stack.split(";")
        total += count
        cats[classify(frames)] += count
        for label, needle in INCLUSIVE:
            if any(needle in f for f in frames):
                incl[label] += count
    return total, cats, incl


def _connz(port: int) -> dict[str, dict[str, int]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/connz?limit=1024", timeout=5) as r:
        data = json.load(r)
    return {c.get("name", ""): c for c in data.get("connections", [])}


async def measure(shape: str, iterations: int, max_in_flight: int, rate: int) -> Any:
    spy = ensure_venv("tools") / "bin" / "py-spy"
    if shape == "chain":
        text = playbooks.chain(iterations)
    elif shape == "fanout":
        text = playbooks.three_step()
    elif shape == "local":  # issue 29: one noop task per iteration, exec: local
        text = playbooks.tiny_loop(iterations, exec_="local", max_in_flight=max_in_flight)
    else:
        text = playbooks.loop(iterations, parallel=True, max_in_flight=max_in_flight)
    OUT.mkdir(parents=True, exist_ok=True)
    async with Cluster(concurrency=256) as c:
        assert c.nats is not None and c.server is not None
        js = c.nc.jetstream()
        watch = await FinishWatch(c.nc).start()

        async def one(req: dict[str, Any]) -> float:
            if shape == "fanout":  # ``iterations`` executions at once
                reqs = [new_request(text) for _ in range(iterations if req["payload"] == {} else 10)]
            else:
                reqs = [req]
            done = [watch.expect(execution_id_for(r["request_id"])) for r in reqs]
            t0 = time.perf_counter()
            await asyncio.gather(*[await submit(js, r) for r in reqs])
            await asyncio.wait_for(asyncio.gather(*done), max(120, iterations / 20))
            return max(watch.succeeded(execution_id_for(r["request_id"])) for r in reqs) - t0

        await one(new_request(text, {"n": 50}))  # warm-up (the chain runs whole)
        before = _connz(c.nats.monitor_port)
        record = [str(spy), "record", "-r", str(rate), "-f", "raw", "--nonblocking"]
        spies = {
            svc.role: subprocess.Popen(
                [*record, "--pid", str(svc.proc.pid), "-o", str(OUT / f"hotpath-{shape}-{svc.role}.txt")],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for svc in (c.server, c.worker_procs[0])
        }
        await asyncio.sleep(1.0)  # py-spy attaches
        cpu_before = c.cpu_seconds()
        wall = await one(new_request(text))
        cpu = {k: v - cpu_before[k] for k, v in c.cpu_seconds().items()}
        for p in spies.values():
            p.send_signal(signal.SIGINT)
        for p in spies.values():
            p.wait(timeout=30)
        after = _connz(c.nats.monitor_port)
        await watch.stop()
    msgs = {}
    for name in ("noetl-server", "noetl-worker"):
        b, a = before.get(name, {}), after.get(name, {})
        msgs[name] = {
            k: (a.get(k, 0) - b.get(k, 0)) / iterations for k in ("in_msgs", "out_msgs", "in_bytes")
        }
    profiles = {}
    for role in spies:
        total, cats, incl = analyze((OUT / f"hotpath-{shape}-{role}.txt").read_text())
        profiles[role] = {"samples": total, "categories": cats, "inclusive": incl}
    meta = {
        "shape": shape,
        "iterations": iterations,
        "max_in_flight": max_in_flight,
        "wall": wall,
        "cpu": cpu,
    }
    return {**meta, "rate": rate}, msgs, profiles


def report(meta: dict[str, Any], msgs: dict[str, Any], profiles: dict[str, Any]) -> str:
    n, rate = meta["iterations"], meta["rate"]
    unit = {"chain": "step", "fanout": "execution"}.get(meta["shape"], "iteration")
    what = {
        "chain": f"Chain of {n} sequential noop steps",
        "fanout": f"{n} executions of a three-step playbook at once",
        "local": f"exec: local loop of {n} iterations (one noop task each), max_in_flight "
        f"{meta['max_in_flight']}",
    }.get(
        meta["shape"], f"Loop of {n} iterations (two noop tasks each), max_in_flight {meta['max_in_flight']}"
    )
    lines = [
        f"{what}: {meta['wall']:.2f} s, {n / meta['wall']:.0f} {unit}s/s.",
        "",
        f"Messages each connection published per {unit} (nats-server /connz):",
        "",
        f"| connection | msgs sent/{unit} | bytes sent/{unit} | msgs received/{unit} |",
        "|---|---|---|---|",
    ]
    for name, m in msgs.items():
        lines.append(f"| {name} | {m['in_msgs']:.1f} | {m['in_bytes']:.0f} | {m['out_msgs']:.1f} |")
    lines += [
        "",
        "CPU time of each process during the run (kernel accounting; the profiled ones pay py-spy too):",
        "",
        f"| process | CPU s | % of one core | µs/{unit} |",
        "|---|---|---|---|",
    ]
    for name, secs in meta["cpu"].items():
        lines.append(f"| {name} | {secs:.2f} | {secs / meta['wall'] * 100:.0f} % | {secs * 1e6 / n:.0f} |")
    total = sum(meta["cpu"].values())
    lines.append(f"| all | {total:.2f} | {total / meta['wall'] * 100:.0f} % | {total * 1e6 / n:.0f} |")
    for role, p in profiles.items():
        total = p["samples"] or 1
        busy = total / rate
        lines += [
            "",
            f"### {role}: {busy:.2f} s of CPU samples in {meta['wall']:.2f} s "
            f"({busy / meta['wall'] * 100:.0f} % of one core), {busy * 1e6 / n:.0f} µs per {unit}",
            "",
            f"| self time by activity | share | µs/{unit} |",
            "|---|---|---|",
        ]
        for label, c in p["categories"].most_common(14):
            lines.append(f"| {label} | {c / total * 100:.1f} % | {c / rate * 1e6 / n:.0f} |")
        lines += ["", f"| inclusive (anywhere on the stack) | share | µs/{unit} |", "|---|---|---|"]
        for label, c in sorted(p["inclusive"].items(), key=lambda kv: -kv[1]):
            lines.append(f"| {label} | {c / total * 100:.1f} % | {c / rate * 1e6 / n:.0f} |")
    return "\n".join(lines)


# the sizes docs/performance.md reports ("Where the time goes now")
DEFAULT_ITERATIONS = {"loop": 5000, "chain": 300, "fanout": 3000, "local": 20000}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.hotpath", description=__doc__)
    ap.add_argument("--shape", choices=["loop", "chain", "fanout", "local"], default="loop")
    ap.add_argument(
        "--iterations",
        type=int,
        help="loop iterations, chain steps or executions (default: "
        + ", ".join(f"{shape} {n}" for shape, n in DEFAULT_ITERATIONS.items())
        + "; a chain's inline playbook must stay under the 512 KiB request limit, ~4 800 steps)",
    )
    ap.add_argument("--max-in-flight", type=int, default=64)
    ap.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    args = ap.parse_args(argv)
    iterations = args.iterations or DEFAULT_ITERATIONS[args.shape]
    meta, msgs, profiles = asyncio.run(measure(args.shape, iterations, args.max_in_flight, args.rate))
    text = report(meta, msgs, profiles)
    (OUT / f"hotpath-{args.shape}.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
