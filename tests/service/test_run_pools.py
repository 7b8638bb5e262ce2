"""`noetl run` starts a worker for every pool its playbook names (issue 27): a step with
``spec.pool: gpu`` used to wait forever for a worker that never came. A child playbook in
``--catalog`` is read for its pools too; one the run cannot see before it starts (a templated
path) gets its worker when its first command is sent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from noetl.cli.pools import playbook_pools
from noetl.dsl.cache import parse_playbook

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pools, path: tests/pools}
workload: {child: tests/pools_child}
workflow:
  - step: start
    spec: {pool: gpu}
    tool: {kind: noop, result: 1}
    next: {arcs: [{step: call}]}
  - step: call
    tool: {kind: playbook, path: "CHILD_PATH"}
"""

CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: pools_child, path: tests/pools_child}
workflow:
  - step: start
    spec: {pool: edge}
    tool: {kind: noop, result: "child"}
"""


def _files(tmp_path: Path, child_path: str) -> tuple[Path, Path]:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    (catalog / "child.yaml").write_text(CHILD)
    parent = tmp_path / "parent.yaml"
    parent.write_text(PARENT.replace("CHILD_PATH", child_path))
    return parent, catalog


def test_the_pools_of_a_playbook_and_of_the_children_it_can_see(tmp_path: Path) -> None:
    parent, catalog = _files(tmp_path, "tests/pools_child")
    pools = playbook_pools(parse_playbook(parent.read_text(), str(parent)), str(catalog))
    assert set(pools) == {"default", "gpu", "edge"}
    assert pools["gpu"] == [f"{parent}: step start"]


def _run(parent: Path, catalog: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "noetl.cli.main", "run", str(parent), "--json", "--catalog", str(catalog)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90, cwd=ROOT)


def test_noetl_run_serves_every_pool_named_in_the_playbook_and_its_child(tmp_path: Path) -> None:
    p = _run(*_files(tmp_path, "tests/pools_child"))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["result"] == "child"
    assert "pool 'gpu'" in p.stderr and "pool 'edge'" in p.stderr


def test_a_pool_only_a_command_reveals_gets_a_worker_too(tmp_path: Path) -> None:
    p = _run(*_files(tmp_path, "{{ workload.child }}"))  # the run cannot see this child's pools
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["result"] == "child"
    assert "pool 'edge' (a command was sent to it)" in p.stderr


async def test_noetl_exec_names_the_pools_no_live_worker_serves(tmp_path: Path) -> None:
    """Against a deployment, `noetl exec FILE` says at once which pool has no worker (from the
    runtime registry that `noetl workers` reads) rather than letting the execution wait silently."""
    from noetl.cli.pools import unserved_message, unserved_pools
    from noetl.events.memory import MemoryBus
    from noetl.events.runtime import RuntimeRegistrar

    bus = MemoryBus()
    registrar = RuntimeRegistrar(bus, "worker", lambda: {"pool": "default"}, id="w1")
    await registrar.start()
    try:
        parent, catalog = _files(tmp_path, "tests/pools_child")
        pools = playbook_pools(parse_playbook(parent.read_text(), str(parent)), str(catalog))
        assert await unserved_pools(bus, pools) == ["edge", "gpu"]
        message = unserved_message("gpu", pools["gpu"])
        assert "pool 'gpu'" in message and "step start" in message and "noetl worker --pool gpu" in message
    finally:
        await registrar.stop()
        await bus.close()
