"""Error kinds are API: each is unique to its class and documented in docs/errors.md."""

from __future__ import annotations

import ast
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


def _error_literals(tree: ast.AST) -> list[int]:
    """Lines of dict literals shaped like an error: a ``kind`` key beside ``message`` or
    ``retryable``, or the value of an ``error`` key holding a ``kind``."""
    out: list[int] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
        if "kind" in keys and keys & {"message", "retryable"}:
            out.append(node.lineno)
        for k, v in zip(node.keys, node.values, strict=True):
            if isinstance(k, ast.Constant) and k.value == "error" and isinstance(v, ast.Dict):
                inner = {x.value for x in v.keys if isinstance(x, ast.Constant)}
                if "kind" in inner:
                    out.append(node.lineno)
    return out


def test_no_error_is_written_outside_the_tree() -> None:
    """One error model (issue 16): every error a user sees is a class of ``noetl.dsl.errors``,
    built there (``to_dict``, ``reply_error``, ``brief``), never a hand-written dict."""
    tree_file = ROOT / "libs/dsl/noetl/dsl/errors.py"
    sources = [
        p
        for folder in ("libs", "services")
        for p in (ROOT / folder).rglob("*.py")
        if p != tree_file and "migrate" not in p.parts  # the migrator writes playbooks, not errors
    ]
    assert len(sources) > 100, f"only {len(sources)} sources found"
    hits = [
        f"{p.relative_to(ROOT)}:{line}" for p in sources for line in _error_literals(ast.parse(p.read_text()))
    ]
    assert not hits, f"{len(hits)} hand-written error dicts (raise or convert a class of errors.py): {hits}"


def test_the_literal_check_finds_a_hand_written_error() -> None:
    code = 'x = {"kind": "oops", "message": "m"}\ny = {"error": {"kind": "k"}}\nz = {"kind": "noop"}'
    assert _error_literals(ast.parse(code)) == [1, 2]
