"""requirements.lock (scripts/lock.sh, installed by the Dockerfile) agrees with pyproject.toml: every
direct dependency of the image's extras is pinned, within pyproject's bounds, with hashes."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"


def _lock() -> dict[str, tuple[Version, list[str]]]:
    """Package name -> (pinned version, its hashes)."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current = ""
    for line in LOCK.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s\\;]+)", line):
            current = str(canonicalize_name(m[1]))
            assert current not in pins, f"{current} pinned twice"
            pins[current] = (Version(m[2]), [])
        elif m := re.match(r"^\s+--hash=(sha256:[0-9a-f]{64})", line):
            pins[current][1].append(m[1])
        else:
            assert not line.strip() or line.lstrip().startswith("#"), f"unexpected line: {line!r}"
    return pins


def _direct(extras: list[str]) -> list[Requirement]:
    """The project's dependencies plus those of `extras`, the self-references expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name = canonicalize_name(project["name"])
    optional = project["optional-dependencies"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for r in map(Requirement, optional[extra]):
            if canonicalize_name(r.name) == name:
                todo.extend(r.extras)
            else:
                reqs.append(r)
    return reqs


def test_the_image_installs_the_lock_of_its_default_extras() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG EXTRAS=all" in dockerfile
    assert "COPY pyproject.toml README.md requirements.lock" in dockerfile
    assert "pip install --require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "--extra all" in (ROOT / "scripts" / "lock.sh").read_text()


def test_every_direct_dependency_is_pinned_within_pyprojects_bounds() -> None:
    pins = _lock()
    direct = _direct(["all"])
    assert len(direct) > 15
    for req in direct:
        name = str(canonicalize_name(req.name))
        assert name in pins, f"{req} is not in requirements.lock: run scripts/lock.sh"
        version = pins[name][0]
        assert req.specifier.contains(version, prereleases=True), (
            f"requirements.lock pins {name}=={version}, outside pyproject's {req}: run scripts/lock.sh"
        )


def test_every_pin_has_hashes_and_nothing_is_left_unpinned() -> None:
    pins = _lock()
    assert "noetl-jetstream" not in pins  # the project itself is built from the source, not locked
    for name, (_, hashes) in pins.items():
        assert hashes, f"{name} has no --hash: pip --require-hashes would refuse the lock"
    # the lock is closed: only `name==version` lines, so pip --require-hashes installs it as it is
    text = LOCK.read_text()
    assert not re.search(r"^[A-Za-z0-9][^=\n]*(>=|<=|~=|>|<)", text, re.M)
