"""`noetl worker --http-port` as a process (issue 30): the port opens, /ready turns 200 once the
worker runs, /metrics parses with prometheus_client, stderr is JSON lines only, SIGTERM ends it."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_process_serves_probes_and_metrics(nats_server) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env["NOETL_LOG_FORMAT"] = "json"
    cmd = [sys.executable, "-m", "noetl.cli.main", "worker", "--nats-url", nats_server.url]
    proc = subprocess.Popen(
        [*cmd, "--pool", "port_test", "--http-port", "0"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    seen: list[str] = []
    try:
        assert proc.stderr is not None
        stderr = proc.stderr

        def pump() -> None:
            for x in stderr:
                lines.put(x)

        threading.Thread(target=pump, daemon=True).start()
        url = None
        while url is None:
            line = lines.get(timeout=30)
            seen.append(line)
            record = json.loads(line)
            if "/metrics on" in record["event"]:
                url = record["url"]
        assert url.startswith("http://127.0.0.1:"), url
        assert httpx.get(f"{url}/live", timeout=5).status_code == 200
        deadline = time.monotonic() + 30
        while httpx.get(f"{url}/ready", timeout=5).status_code != 200:
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.1)
        text = httpx.get(f"{url}/metrics", timeout=5).text
        names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
        assert {"noetl_worker_utilization", "noetl_worker_slots", "process_cpu_seconds_total"} <= names
        assert 'pool="port_test"' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    time.sleep(0.2)
    while not lines.empty():
        seen.append(lines.get())
    assert rc == 0, seen
    for line in seen:  # JSON lines only: nothing plain mixed in
        json.loads(line)
