"""The documentation's playbooks are real: each validates, and the representative ones run.

Every ```yaml block of the pages written alongside `docs/examples/` is either a whole playbook
that validates or an excerpt of one of the example files, so a page cannot show YAML that the
validator would reject, nor drift from the file it quotes.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.dsl import validate_text
from noetl.store.credentials import load_credentials_file

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
EXAMPLES = DOCS / "examples"
CREDENTIALS = EXAMPLES / "credentials"
PAGES = [
    "README.md",
    "quickstart.md",
    "dsl.md",
    "tools.md",
    "nats-contract.md",
    "architecture.md",
    "errors.md",
]

PLAYBOOKS = sorted(p for p in EXAMPLES.rglob("*.yaml") if CREDENTIALS not in p.parents)
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in textwrap.dedent(text).strip("\n").splitlines()]


def _is_excerpt(block: str) -> bool:
    """The block's lines, re-indented, are consecutive lines of some example file."""
    want = _lines(block)
    for path in EXAMPLES.rglob("*.yaml"):
        have = path.read_text().splitlines()
        for start in range(len(have) - len(want) + 1):
            if _lines("\n".join(have[start : start + len(want)])) == want:
                return True
    return False


def _blocks() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for i, match in enumerate(YAML_BLOCK.finditer((DOCS / page).read_text())):
            out.append((f"{page}#{i}", match.group(1)))
    return out


BLOCKS = _blocks()


def test_there_are_examples() -> None:
    assert len(PLAYBOOKS) >= 20 and BLOCKS


@pytest.mark.parametrize("path", PLAYBOOKS, ids=[str(p.relative_to(EXAMPLES)) for p in PLAYBOOKS])
def test_example_validates(path: Path) -> None:
    problems = validate_text(path.read_text(), str(path))
    assert problems == [], "\n".join(map(str, problems))


@pytest.mark.parametrize("where, block", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_yaml_block_is_a_valid_playbook_or_an_excerpt_of_one(where: str, block: str) -> None:
    data = yaml.safe_load(block)
    if isinstance(data, dict) and "apiVersion" in data:
        assert validate_text(block, where) == []
    else:
        assert _is_excerpt(block), f"{where}: neither a playbook nor an excerpt of docs/examples"


def test_credentials_examples_load() -> None:
    files = sorted(CREDENTIALS.glob("*.yaml"))
    assert files
    for f in files:
        assert all(entry["data"] for entry in load_credentials_file(f).values())


def test_links_to_examples_exist() -> None:
    for page in PAGES:
        for target in re.findall(r"\]\((examples/[^)#]+)\)", (DOCS / page).read_text()):
            assert (DOCS / target).exists(), f"{page} links to missing {target}"


def _noetl() -> list[str]:
    exe = ROOT / ".venv" / "bin" / "noetl"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "noetl.cli.main"]


# (example, extra arguments, what the docs say about the run)
RUNS: list[tuple[str, list[str], dict[str, Any]]] = [
    (
        "quickstart.yaml",
        ["--payload", '{"orders": [{"id": 7, "amount": 250}]}'],
        {"result": "large order: 250", "ctx": {"total": 250}},
    ),
    (
        "task_policy.yaml",
        [],
        {"result": {"batch": 3, "rows": 30}, "ctx": {"connected_on_attempt": 3, "loaded": 60, "batch": 4}},
    ),
    ("loop_parallel.yaml", [], {"result": {"done": 3, "failed": 1, "parsed": ["a.csv", "b.csv", "c.csv"]}}),
    ("subplaybook.yaml", ["--catalog", str(EXAMPLES / "lib")], {"result": {"doubled": 42}}),
    (
        "tool_script.yaml",
        [],
        {"result": {"count": 2, "lines": ["hello ada", "hello grace"]}, "ctx": {"missing": True}},
    ),
]


def test_representative_examples_run() -> None:
    """`noetl run FILE --json` on each, all at once (each run is a private nats-server)."""
    procs = [
        (
            name,
            expect,
            subprocess.Popen(
                [*_noetl(), "run", str(EXAMPLES / name), "--json", *args],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            ),
        )
        for name, args, expect in RUNS
    ]
    for name, expect, proc in procs:
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, f"{name}: {stderr}"
        out = json.loads(stdout)
        assert out["status"] == "success", (name, out["error"])
        assert out["result"] == expect["result"], name
        assert out["ctx"] == expect.get("ctx", out["ctx"]), name
