"""Size limits on the code under services/ and libs/, so a module or a function that grows past
what one reading holds is split, or says why it is not.

A module over ``MAX_MODULE_LINES`` must be in ``LONG_MODULES`` with its reason. A function over
``MAX_FUNCTION_LINES`` (its whole text, docstring and decorators included) must either have a
docstring line starting with ``Long:`` giving the reason, or be in ``LONG_FUNCTIONS`` with one.
The allow-lists only shrink: an entry that is no longer needed fails the test, so whoever fixes a
module or a function removes it here as well.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TREES = ("services", "libs")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60

# path (from the repository root): the reason it is longer
LONG_MODULES: dict[str, str] = {
    "libs/events/noetl/events/settings.py": "every NOETL_* setting as one typed object, each with "
    "its type, default and description; to be split (the values' parsing is in settings_values)",
}

# "path:qualified.name": the reason it is longer
LONG_FUNCTIONS: dict[str, str] = {
    # the CLI's process assembly
    "services/server/noetl/cli/main.py:cmd_run": "to be split: reading the file, running, printing",
    "services/server/noetl/cli/main.py:_serve": "to be split: the server's and the worker's assembly",
    "services/server/noetl/cli/main.py:_serve.start": "to be split with _serve",
}


def _modules() -> Iterator[Path]:
    for tree in TREES:
        yield from sorted((ROOT / tree).rglob("*.py"))


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _functions(
    body: list[ast.stmt], prefix: str = ""
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = prefix + node.name
            yield name, node
            yield from _functions(node.body, name + ".")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node.body, prefix + node.name + ".")


def _length(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def _says_why(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    doc = ast.get_docstring(node) or ""
    return any(line.strip().startswith("Long:") for line in doc.splitlines())


def _long_functions() -> dict[str, int]:
    """Every function over the limit that gives no ``Long:`` reason, by ``path:qualified.name``."""
    found: dict[str, int] = {}
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for name, node in _functions(tree.body):
            if (n := _length(node)) > MAX_FUNCTION_LINES and not _says_why(node):
                found[f"{_rel(path)}:{name}"] = n
    return found


def _long_modules() -> dict[str, int]:
    found = {}
    for path in _modules():
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES:
            found[_rel(path)] = n
    return found


def test_no_module_over_the_limit() -> None:
    over = {p: n for p, n in _long_modules().items() if p not in LONG_MODULES}
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them): {over}"


def test_no_function_over_the_limit_without_a_reason() -> None:
    over = {f: n for f, n in _long_functions().items() if f not in LONG_FUNCTIONS}
    assert not over, (
        f"functions over {MAX_FUNCTION_LINES} lines: split them, or give the reason in a docstring "
        f"line starting with 'Long:': {over}"
    )


def test_the_allow_lists_only_hold_what_is_still_too_long() -> None:
    modules, functions = _long_modules(), _long_functions()
    stale = [p for p in LONG_MODULES if p not in modules] + [f for f in LONG_FUNCTIONS if f not in functions]
    assert not stale, f"now within the limits: remove from tests/unit/test_structure.py: {stale}"


def test_every_allowance_gives_a_reason() -> None:
    assert all(reason.strip() for reason in [*LONG_MODULES.values(), *LONG_FUNCTIONS.values()])
