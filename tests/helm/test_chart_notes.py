"""The NOTES an install prints, followed as a user would on a fresh install.

Before: NOTES started an execution of `examples/hello`, which a fresh install's catalog does not
have (`no playbook 'examples/hello' in the catalog`). Now they register it first. These tests take
the commands out of the NOTES the real Helm engine renders, check their shape (every `noetl` command
parses, every Deployment, Service and Secret they name is in the release, the request is JSON
naming the playbook registered), then run the in-pod commands in order with the server
container's environment against a fresh nats-server, a server and a worker.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.cli.main import build_parser
from tests.helm.chart import NOTES, ROOT, manifests, named, plain_env, render

NOETL = str(Path(sys.executable).with_name("noetl"))


def commands(notes: str) -> list[str]:
    """The command lines of NOTES (continuations joined), in order."""
    joined = re.sub(r"\\\n\s*", "", notes)
    return [
        ln.strip()
        for ln in joined.splitlines()
        if re.match(r"\s*(kubectl|nats|curl|helm|TOKEN=)\s", ln)
    ]


def in_pod(cmd: str) -> tuple[str, list[str], str | None]:
    """`kubectl -n NS exec [-i] deploy/NAME -- ARGV [< FILE]` -> (NAME, ARGV, FILE)."""
    words = shlex.split(cmd)
    stdin = None
    if "<" in words:
        at = words.index("<")
        stdin, words = words[at + 1], words[:at]
    sep = words.index("--")
    assert words[:4] == ["kubectl", "-n", words[2], "exec"], cmd
    (target,) = [w for w in words[4:sep] if w.startswith("deploy/")]
    if stdin is not None:
        assert "-i" in words[4:sep], f"reads stdin without -i: {cmd}"
    return target.removeprefix("deploy/"), words[sep + 1 :], stdin


def check_shape(values: dict[str, Any]) -> list[str]:
    out = render(values)
    notes, docs = out[NOTES], manifests(out)
    cmds = commands(notes)
    pod_cmds = [c for c in cmds if c.startswith("kubectl") and " exec " in c]
    actions = [in_pod(c)[1][:3] for c in pod_cmds]
    # the playbook is registered before anything runs it
    assert actions[0][:3] == ["noetl", "catalog", "register"], actions
    assert ["noetl", "exec", "--path"] in actions
    registered_from = in_pod(pod_cmds[0])[2]
    assert registered_from is not None
    path = yaml.safe_load((ROOT / registered_from).read_text())["metadata"]["path"]
    for c in pod_cmds:
        deployment, argv, _ = in_pod(c)
        named(docs, "Deployment", deployment)  # it exists in this release
        assert argv[0] == "noetl"
        args = build_parser().parse_args(argv[1:])  # a command the image's CLI takes
        if args.command == "exec":
            assert args.path == path and args.wait and isinstance(json.loads(args.payload), dict)
        if args.command == "catalog":
            assert args.files == ["/dev/stdin"]
    for c in cmds:
        words = shlex.split(c)
        if words[0] == "nats" and "pub" in words:
            subject, body = words[words.index("pub") + 1 :]
            assert subject == "noetl.requests.execute"
            request = json.loads(body)
            assert request["path"] == path and request["request_id"]
        if words[0] == "nats" and "sub" in words:
            assert words[-1].startswith("noetl.events.")
        if words[:1] == ["kubectl"] and "port-forward" in words:
            svc = words[words.index("port-forward") + 1]
            assert svc.startswith("svc/")
            named(docs, "Service", svc.removeprefix("svc/"))
        if words[:1] == ["kubectl"] and "secret" in words:
            secret = named(docs, "Secret", words[words.index("secret") + 1])
            key = re.search(r"\{\.data\.([a-z-]+)\}", c)[1]
            assert key in (secret.get("data") or {}) or key in (secret.get("stringData") or {})
    return cmds


def test_notes_register_the_playbook_before_running_it() -> None:
    cmds = check_shape({})
    assert cmds[0] == (
        "kubectl -n noetl exec -i deploy/noetl-server -- "
        "noetl catalog register /dev/stdin < examples/hello.yaml"
    )
    assert "nats --server nats://nats:4222 pub noetl.requests.execute" in " ".join(cmds)


def test_notes_reach_the_bundled_nats_through_a_port_forward() -> None:
    cmds = check_shape({"nats": {"enabled": True}})
    assert "kubectl -n noetl port-forward svc/noetl-nats 4222:4222" in cmds
    assert not any("nats://noetl-nats" in c for c in cmds)  # a name only the cluster resolves


def test_notes_without_a_server_use_a_worker_pod() -> None:
    cmds = check_shape({"server": {"enabled": False}, "worker": {"pools": [{"name": "etl_jobs"}]}})
    assert cmds[0].startswith("kubectl -n noetl exec -i deploy/noetl-worker-etl-jobs -- noetl catalog")


@pytest.mark.slow
def test_the_in_pod_commands_work_on_a_fresh_install(fresh_nats: Any, tmp_path: Path) -> None:
    """The server container's environment (its ConfigMap, NOETL_API_TOKEN), a fresh nats-server with
    an empty catalog, a server and a worker of the release's pool; then the NOTES' commands in order."""
    out = render({"worker": {"pools": [{"name": "default", "concurrency": 4}]}})
    docs = manifests(out)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NOETL_")}
    env.update(plain_env(docs, named(docs, "Deployment", "noetl-server")))
    env.update(
        NOETL_NATS_URL=fresh_nats.url,
        NOETL_API_TOKEN="t" * 32,
        NOETL_API_ADMIN_TOKEN="a" * 32,
        HOME=str(tmp_path),
        NOETL_LOG_LEVEL="WARNING",
    )
    procs = [
        subprocess.Popen([NOETL, "server", "--http-port", "0"], env=env, stderr=subprocess.DEVNULL),
        subprocess.Popen([NOETL, "worker", "--pool", "default"], env=env, stderr=subprocess.DEVNULL),
    ]
    try:
        execution_id = "<execution_id>"  # what `noetl exec` prints, once it has run
        for c in commands(out[NOTES]):
            if not (c.startswith("kubectl") and " exec " in c):
                continue
            _, argv, stdin = in_pod(c)
            argv = [NOETL, *argv[1:]]
            argv = [execution_id if a == "<execution_id>" else a for a in argv]
            deadline = time.monotonic() + 60
            while True:
                run = subprocess.run(
                    argv,
                    env=env,
                    cwd=ROOT,
                    stdin=open(ROOT / stdin) if stdin else subprocess.DEVNULL,  # noqa: SIM115
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                # the server may still be starting (no one answers yet): a user would try again
                if run.returncode == 0 or time.monotonic() > deadline or "catalog" in argv:
                    break
                time.sleep(1)
            assert run.returncode == 0, f"{c}\n{run.stdout}\n{run.stderr}"
            if argv[1] == "exec":
                assert "success" in run.stdout, run.stdout
                execution_id = re.search(r"[0-9a-f]{32}", run.stdout)[0]
            if argv[1] == "events":
                assert "workflow.finished" in run.stdout
        assert execution_id != "<execution_id>"
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                pytest.fail("a process did not stop")
