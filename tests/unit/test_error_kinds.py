"""Error kinds are API: each is unique to its class and documented in docs/errors.md."""

from __future__ import annotations

import re
from pathlib import Path

from noetl.dsl import errors

ROOT = Path(__file__).resolve().parents[2]
ERRORS_MD = (ROOT / "docs" / "errors.md").read_text()


def _classes() -> list[type[errors.NoetlError]]:
    out: list[type[errors.NoetlError]] = []
    stack: list[type[errors.NoetlError]] = [errors.NoetlError]
    while stack:
        cls = stack.pop()
        out.append(cls)
        stack.extend(cls.__subclasses__())
    return out


def test_every_class_names_a_kind_of_its_own() -> None:
    seen: dict[str, str] = {}
    for cls in _classes():
        kind = cls.__dict__.get("kind")
        assert isinstance(kind, str) and kind, f"{cls.__name__} inherits its kind instead of naming one"
        assert kind not in seen, f"{cls.__name__} and {seen[kind]} share the kind {kind!r}"
        seen[kind] = cls.__name__
    assert set(seen) == set(errors.all_error_kinds())


def test_every_kind_has_a_section_in_errors_md() -> None:
    missing = [k for k in errors.all_error_kinds() if f"### `{k}`" not in ERRORS_MD]
    assert not missing, f"docs/errors.md has no section for {missing}"


def test_kinds_written_outside_the_tree_are_documented_too() -> None:
    """The engine and the worker set a few kinds as plain strings; they are API as well."""
    literal = re.compile(r"""["']kind["']:\s*["']([a-z_]+)["']""")
    found: set[str] = set()
    sources = [
        *(ROOT / "services/server/noetl/engine").rglob("*.py"),
        *(ROOT / "services/worker/noetl/worker").rglob("*.py"),
        *(ROOT / "services/server/noetl/server").glob("*.py"),  # the HTTP API's kinds are in api.md
    ]
    for path in sources:
        found.update(literal.findall(path.read_text()))
    assert found, "no literal kinds found: the pattern no longer matches the code"
    missing = sorted(k for k in found if f"`{k}`" not in ERRORS_MD)
    assert not missing, f"docs/errors.md does not mention {missing}"
