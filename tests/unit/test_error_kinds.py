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
        if cls.__name__.startswith("_"):  # a module's private carrier: it reaches no user as itself
            assert "kind" not in cls.__dict__, f"{cls.__name__} is private and names a kind"
            continue
        kind = cls.__dict__.get("kind")
        assert isinstance(kind, str) and kind, f"{cls.__name__} inherits its kind instead of naming one"
        assert kind not in seen, f"{cls.__name__} and {seen[kind]} share the kind {kind!r}"
        seen[kind] = cls.__name__
    assert set(seen) == set(errors.all_error_kinds())


def test_every_kind_has_a_section_in_errors_md() -> None:
    headings = [line for line in ERRORS_MD.splitlines() if line.startswith("### ")]  # one may name several
    missing = [k for k in errors.all_error_kinds() if not any(f"`{k}`" in h for h in headings)]
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


_BUILTIN_BASES = {"Exception", "BaseException", "ValueError", "TypeError", "RuntimeError", "KeyError",
                  "LookupError", "OSError", "ArithmeticError"}
# outside the tree on purpose, each with its reason in its docstring
_OUTSIDE = {"TaskTimedOutError"}  # BaseException: a task's own `except Exception` must not swallow it


def _exception_classes() -> list[tuple[str, str, set[str]]]:
    """(where, class name, base names) of every class of libs/ and services/ that derives from a
    builtin exception or from a class whose name ends in Error."""
    out = []
    for folder in ("libs", "services"):
        for p in (ROOT / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(p.read_text())):
                if not isinstance(node, ast.ClassDef):
                    continue
                bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else ""
                         for b in node.bases}
                if bases & _BUILTIN_BASES or any(b.endswith("Error") for b in bases):
                    out.append((f"{p.relative_to(ROOT)}:{node.lineno}", node.name, bases))
    return out


def test_every_error_is_in_the_tree_and_named_so() -> None:
    """Issue 28: no error family beside the tree (the port's, the wire's, the puller's, the
    server's unstorable decision were), and every exception's name ends in Error."""
    classes = _exception_classes()
    assert len(classes) > 40, f"only {len(classes)} exception classes found"
    tree = ("libs/dsl/noetl/dsl/errors.py", "libs/dsl/noetl/dsl/errors_bus.py")
    beside = [f"{where} {name}{sorted(bases)}" for where, name, bases in classes
              if bases & _BUILTIN_BASES and not where.startswith(tree) and name not in _OUTSIDE]
    assert not beside, f"exceptions derived from a builtin outside noetl.dsl.errors: {beside}"
    misnamed = [f"{where} {name}" for where, name, _ in classes if not name.rstrip("_").endswith("Error")]
    assert not misnamed, f"exception names that do not end in Error: {misnamed}"
