"""How many functions have ``Any`` in their signature, per package (issue 28).

``Any`` switches the type checker off for whatever crosses it, so this is the number that says
how much of the code mypy actually checks; it should fall. A function counts when ``Any``
appears in an annotation of a parameter or of the return value, written out (an alias such as
``JSON = dict[str, Any]`` is not followed). "public" is a function or method whose own name, and
whose class's name, do not start with ``_`` (dunder methods count as public).

    .venv/bin/python scripts/any_count.py            # the table
    .venv/bin/python scripts/any_count.py --files    # and the public functions with Any, per file
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# folder of the namespace root -> the packages under it (noetl.<name>)
ROOTS = ("libs/dsl", "libs/events", "services/server", "services/worker")


@dataclass
class Tally:
    functions: int = 0
    with_any: int = 0
    public: int = 0
    public_with_any: int = 0
    where: list[str] = field(default_factory=list)


def _mentions_any(node: ast.expr | None) -> bool:
    if node is None:
        return False
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "Any":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "Any":
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and "Any" in sub.value:
            try:
                if _mentions_any(ast.parse(sub.value, mode="eval").body):
                    return True
            except SyntaxError:
                continue
    return False


def _signature_has_any(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    a = fn.args
    params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(p for p in (a.vararg, a.kwarg) if p)]
    return _mentions_any(fn.returns) or any(_mentions_any(p.annotation) for p in params)


def _public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _walk(tree: ast.AST, public_scope: bool, path: str, tally: Tally) -> None:
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            _walk(node, public_scope and _public(node.name), path, tally)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            has_any = _signature_has_any(node)
            public = public_scope and _public(node.name)
            tally.functions += 1
            tally.with_any += has_any
            tally.public += public
            tally.public_with_any += public and has_any
            if public and has_any:
                tally.where.append(f"{path}:{node.lineno}: {node.name}")
            # functions nested in functions are private to them: not counted
        elif isinstance(node, ast.If | ast.Try):  # definitions under TYPE_CHECKING, try/except
            _walk(node, public_scope, path, tally)


def count() -> dict[str, Tally]:
    """Per package (``noetl.engine``, ...): its functions, and those with Any in the signature."""
    tallies: dict[str, Tally] = defaultdict(Tally)
    for root in ROOTS:
        base = ROOT / root / "noetl"
        for file in sorted(base.rglob("*.py")):
            package = "noetl." + file.relative_to(base).parts[0].removesuffix(".py")
            tree = ast.parse(file.read_text(), str(file))
            _walk(tree, True, str(file.relative_to(ROOT)), tallies[package])
    return dict(sorted(tallies.items()))


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", action="store_true", help="list the public functions with Any")
    args = parser.parse_args(argv)
    tallies = count()
    total = Tally()
    head = ("package", "functions", "with Any", "%", "public", "with Any", "%")
    print("{:<16} {:>9} {:>9} {:>5}   {:>6} {:>9} {:>5}".format(*head))
    for name, t in tallies.items():
        print(
            f"{name:<16} {t.functions:>9} {t.with_any:>9} {_pct(t.with_any, t.functions):>5}   "
            f"{t.public:>6} {t.public_with_any:>9} {_pct(t.public_with_any, t.public):>5}"
        )
        total.functions += t.functions
        total.with_any += t.with_any
        total.public += t.public
        total.public_with_any += t.public_with_any
        total.where += t.where
    print(
        f"{'all':<16} {total.functions:>9} {total.with_any:>9} {_pct(total.with_any, total.functions):>5}   "
        f"{total.public:>6} {total.public_with_any:>9} {_pct(total.public_with_any, total.public):>5}"
    )
    if args.files:
        print("\n".join(total.where))
    return 0


if __name__ == "__main__":
    sys.exit(main())
