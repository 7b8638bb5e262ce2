"""The Dockerfile, checked without a Docker engine: every instruction is a real one, the image runs
`noetl` as a non-root user, and what it copies exists and is not excluded by .dockerignore."""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path

from noetl.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]

INSTRUCTIONS = {
    "FROM", "RUN", "CMD", "LABEL", "EXPOSE", "ENV", "ADD", "COPY", "ENTRYPOINT", "VOLUME",
    "USER", "WORKDIR", "ARG", "ONBUILD", "STOPSIGNAL", "HEALTHCHECK", "SHELL",
}  # fmt: skip


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with comments dropped and continuation lines joined."""
    text = (ROOT / "Dockerfile").read_text()
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_every_instruction_is_known() -> None:
    found = _instructions()
    assert found and found[0] == ("FROM", "python:3.11-slim")
    assert [w for w, _ in found if w not in INSTRUCTIONS] == []


def test_entrypoint_is_noetl_as_a_non_root_user() -> None:
    instructions = _instructions()
    found = dict(instructions)  # the last of each instruction is the one in force
    assert json.loads(found["ENTRYPOINT"]) == ["noetl"]
    cmd = json.loads(found["CMD"])
    assert cmd == ["server"]
    assert build_parser().parse_args(cmd).command == "server"
    user = found["USER"].split(":")[0]
    assert user.isdigit() and int(user) != 0  # numeric, so the kubelet can check runAsNonRoot
    install = r'pip install (-c \S+ )?(--no-deps )?"?\.\[\$\{?EXTRAS'  # the project, with its extras
    assert any(w == "RUN" and re.search(install, a) for w, a in instructions)
    assert "EXTRAS=all" in dict(instructions)["ARG"]  # asyncpg, duckdb, nkeys, otlp: extras now


def test_copied_sources_exist_and_are_not_ignored() -> None:
    ignored = [
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for word, rest in _instructions():
        if word == "COPY":
            *sources, _dest = rest.split()
            for src in sources:
                assert (ROOT / src).exists(), src
                assert not any(fnmatch.fnmatch(src, pat) for pat in ignored), f"{src} is in .dockerignore"
