"""Executions end to end on a real nats-server: server and worker meet only on JetStream."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.events import subjects as s
from noetl.events.bus import read_messages
from noetl.events.nats_port import NatsBus

ROOT = Path(__file__).resolve().parents[2]

CHAIN = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: chain, path: tests/chain}
workload: {n: 3}
workflow:
  - step: start
    next: {arcs: [{step: double, args: {x: "{{ workload.n }}"}}]}
  - step: double
    tool:
      - name: calc
        kind: python
        args: {x: "{{ args.x }}"}
        code: |
          def main(x):
              return x * 2
        spec:
          policy:
            rules:
              - else: {then: {do: continue, set_ctx: {doubled: "{{ outcome.result }}"}}}
"""


def test_noetl_run_command_json_contract(tmp_path: Path) -> None:
    f = tmp_path / "chain.yaml"
    f.write_text(CHAIN)
    t0 = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", str(f), "--json", "--payload", '{"n": 5}'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    took = time.monotonic() - t0
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) == {"execution_id", "status", "result", "ctx", "error", "steps", "events"}
    assert out["result"] == 10 and out["steps"]["double"] == [{"status": "done", "result": 10}]
    assert took < 30


@pytest.mark.parametrize("rows", [6_500, 14_000], ids=["600KB", "1.3MB"])
def test_noetl_run_of_a_playbook_over_the_request_limit(tmp_path: Path, rows: int) -> None:
    """Inline it would be over the 512 KiB request limit: `noetl run` registers it in its private
    catalog (over 1 MiB: as an object) and requests it by path."""
    from tests.service.test_catalog import playbook

    f = tmp_path / "big.yaml"
    f.write_text(playbook("tests/big", rows))
    assert f.stat().st_size > 600_000
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", str(f), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["status"] == "success" and out["result"] == 42


SLEEPER = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sleeper, path: tests/sleeper}
workflow:
  - step: start
    tool:
      - name: nap
        kind: python
        code: |
          import time
          def main():
              time.sleep(60)
"""


def _nats_child(pid: int) -> tuple[int, str] | None:
    """The nats-server process whose parent is ``pid``, and its store directory."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(fields[1]) == pid and cmdline[0].endswith(b"nats-server"):
            return int(stat.parent.name), cmdline[cmdline.index(b"-sd") + 1].decode()
    return None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_noetl_run_stopped_by_a_signal_leaves_no_nats_server(tmp_path: Path, sig: int) -> None:
    """`timeout`, a CI cancel or a closed terminal: the private nats-server and its store go too."""
    f = tmp_path / "sleeper.yaml"
    f.write_text(SLEEPER)
    p = subprocess.Popen(
        [sys.executable, "-m", "noetl.cli.main", "run", str(f)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    child = None
    try:
        deadline = time.monotonic() + 30
        while (child := _nats_child(p.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert child is not None, "noetl run started no nats-server"
        time.sleep(1.0)  # the execution is under way: the python task sleeps
        p.send_signal(sig)
        rc = p.wait(timeout=30)
        nats_pid, store = child
        left = [
            what
            for what, there in (
                ("nats-server", Path(f"/proc/{nats_pid}").exists()),
                ("store dir", Path(store).exists()),
            )
            if there
        ]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        if child is not None and Path(f"/proc/{child[0]}").exists():  # what a failure left: stop it
            os.kill(child[0], signal.SIGKILL)
        if child is not None:
            shutil.rmtree(child[1], ignore_errors=True)
    assert rc == 128 + sig, p.stderr.read().decode()[-2000:] if p.stderr else rc
    assert left == []


def test_noetl_run_invalid_exits_2(tmp_path: Path) -> None:
    f = tmp_path / "bad.yaml"
    f.write_text(CHAIN.replace("workflow:", "vars: {a: 1}\nworkflow:"))
    p = subprocess.run(
        [sys.executable, "-m", "noetl.cli.main", "run", str(f)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert p.returncode == 2 and "vars" in p.stderr


async def test_checkpoints_are_written_sparingly_and_catch_up_when_idle(nc, services) -> None:
    """A sequential chain is one input per batch; the checkpoint is not written after every one."""
    import asyncio

    js = nc.jetstream()
    kv_stream = f"KV_{s.SERVER_BUCKET}"
    before = (await js.stream_info(kv_stream)).state.last_seq
    steps: list[dict[str, Any]] = [
        {"step": "start", "tool": [{"kind": "noop", "result": 0}], "next": {"arcs": [{"step": "s1"}]}}
    ]
    for i in range(1, 30):
        step: dict[str, Any] = {"step": f"s{i}", "tool": [{"kind": "noop", "result": i}]}
        if i < 29:
            step["next"] = {"arcs": [{"step": f"s{i + 1}"}]}
        steps.append(step)
    doc = {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "c30"}, "workflow": steps}
    text = json.dumps(doc)
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=30)
    assert out["status"] == "success" and out["result"] == 29
    written = (await js.stream_info(kv_stream)).state.last_seq - before
    assert written < 15  # 31 inputs (the request and 30 step.done) decided one at a time
    # the partition goes idle: an empty fetch (1 s) writes the checkpoint up to the last input;
    # on a loaded machine the last input may still be deciding, so wait for it, boundedly
    server, _ = services
    partition = s.partition_of(out["execution_id"], server.partitions)  # not always p0: 8 partitions
    kv = await js.key_value(s.SERVER_BUCKET)
    seen: list[tuple[int, int]] = []
    for _ in range(40):
        await asyncio.sleep(0.5)
        inputs = await js.stream_info(s.EVENTS_STREAM)
        entry = await kv.get(s.checkpoint_key(partition))
        inputs_of = s.partition_input_filters(partition)
        read = await read_messages(NatsBus.of(js), s.EVENTS_STREAM, inputs_of)
        last_input = max(seq for seq, e in read if e)
        seen.append((int(entry.value or b"0"), last_input))
        if int(entry.value or b"0") == last_input:
            break
    assert seen[-1][0] == seen[-1][1] <= inputs.state.last_seq, f"(checkpoint, last input) over 20 s: {seen}"


NOOP_LOOP = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noop_loop, path: tests/noop_loop}
workflow:
  - step: start
    loop: {in: "{{ range(200) | list }}", iterator: x}
    tool: [{name: t, kind: noop}]
"""


async def test_a_noop_iteration_writes_few_event_bytes(nc, services) -> None:
    """Issue 20: a 1 000 000-item loop wrote ~2 KB of events per iteration. Counted here on the
    stream itself: the JetStream bytes of one execution's events per iteration, all included
    (envelope, subject, headers), and the JSON bytes of each per-iteration event."""
    js = nc.jetstream()
    before = (await js.stream_info(s.EVENTS_STREAM)).state.bytes
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": NOOP_LOOP}, timeout=60)
    assert out["status"] == "success" and len(out["result"]) == 200
    stored = (await js.stream_info(s.EVENTS_STREAM)).state.bytes - before
    per_iteration = stored / 200
    sizes: dict[str, list[int]] = {}
    for e in out["events"]:
        sizes.setdefault(e["name"], []).append(len(json.dumps(e, separators=(",", ":"))))
    mean = {k: sum(v) // len(v) for k, v in sizes.items()}
    per_iteration_events = ("loop.iteration.started", "task.started", "task.done", "loop.iteration.done")
    json_per_iteration = sum(mean[n] for n in per_iteration_events)
    # before issue 20: three events, 1574 JSON bytes and ~2070 stored bytes per iteration (nulls and
    # a repeated trace id), then ~1280 and ~1780; issue 27 added loop.iteration.started (spec 003
    # §8, ~340 JSON bytes) and outcome.meta.ended_at: four events, ~1670 and ~2330
    assert json_per_iteration < 1750 and per_iteration < 2450, (
        f"{json_per_iteration} JSON bytes and {per_iteration:.0f} stored bytes per iteration; "
        f"event JSON sizes {mean}"
    )
    for name in per_iteration_events:
        ev = next(e for e in out["events"] if e["name"] == name)
        assert not [k for k, v in ev.items() if v is None], f"{name} carries nulls: {ev}"
        assert "trace_id" not in ev and "ctx_patches" not in ev["payload"], ev


async def test_a_local_loop_stores_its_iterations_in_batches(nc, services) -> None:
    """Issue 29: an ``exec: local`` loop's iterations travel as ``events.batched`` messages
    (docs/nats-contract.md "Batched events"), which readers unpack into the events a distributed
    loop writes one by one. Counted on the stream: messages and bytes per iteration; and the
    unpacked events are complete (every field back, none null)."""
    js = nc.jetstream()
    spec = "spec: {mode: parallel, max_in_flight: 16, policy: {exec: local}}"
    text = NOOP_LOOP.replace("iterator: x}", f"iterator: x, {spec}}}")
    before = await js.stream_info(s.EVENTS_STREAM)
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": text}, timeout=60)
    assert out["status"] == "success" and out["result"] == [None] * 200, out["result"]
    after = await js.stream_info(s.EVENTS_STREAM)
    messages = after.state.messages - before.state.messages
    per_iteration = (after.state.bytes - before.state.bytes) / 200
    names = [e["name"] for e in out["events"]]
    per_iteration_events = ("loop.iteration.started", "task.started", "task.done", "loop.iteration.done")
    counts = {n: names.count(n) for n in per_iteration_events}
    assert set(counts.values()) == {200} and "events.batched" not in names, counts
    # 800 iteration events in one message per group of ended iterations, plus the server's ~10
    assert messages < 200 and per_iteration < 1400, (
        f"{messages} messages and {per_iteration:.0f} stored bytes for 200 iterations"
    )
    for name in per_iteration_events:
        ev = next(e for e in out["events"] if e["name"] == name)
        assert not [k for k, v in ev.items() if v is None], f"{name} carries nulls: {ev}"
        assert ev["execution_id"] == out["execution_id"] and ev["source"] == "worker", ev
        assert ev["step_run_id"] and ev["schema_version"] == 1, ev
