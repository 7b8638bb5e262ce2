"""Roles by folder (issue 16), checked on the import graph, transitively.

Each package of the ``noetl`` namespace plays one role; an import that crosses roles the wrong
way would, for example, make a worker load the HTTP server, or the pure engine do I/O. The graph
is read from the sources (imports inside functions included, ``TYPE_CHECKING`` blocks not: they
never run), so the rule holds whatever a process happens to import first.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = [ROOT / "libs/dsl", ROOT / "libs/events", ROOT / "services/server", ROOT / "services/worker"]

# role -> packages it must never reach, directly or through anything it imports
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "noetl.dsl": (
        "noetl.events",
        "noetl.store",
        "noetl.client",
        "noetl.host",
        "noetl.engine",
        "noetl.server",
        "noetl.worker",
        "noetl.cli",
    ),
    "noetl.events": (
        "noetl.store",
        "noetl.client",
        "noetl.host",
        "noetl.engine",
        "noetl.server",
        "noetl.worker",
        "noetl.cli",
    ),
    "noetl.engine": (
        "noetl.store",
        "noetl.client",
        "noetl.host",
        "noetl.server",
        "noetl.worker",
        "noetl.cli",
    ),
    "noetl.store": ("noetl.client", "noetl.engine", "noetl.server", "noetl.worker", "noetl.cli"),
    "noetl.host": (
        "noetl.store",
        "noetl.client",
        "noetl.engine",
        "noetl.server",
        "noetl.worker",
        "noetl.cli",
    ),
    "noetl.client": ("noetl.engine", "noetl.server", "noetl.worker", "noetl.cli"),
    "noetl.worker": ("noetl.server", "noetl.engine", "noetl.cli"),
    "noetl.server": ("noetl.worker", "noetl.cli"),
}
# noetl.events is wire and transport: of the DSL it may use the error tree alone
EVENTS_MAY_USE = ("noetl.dsl.errors", "noetl.dsl.errors_bus")


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for root in ROOTS:
        for path in (root / "noetl").rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    found: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, ast.Import):
                found.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")
                    base = ".".join([*parts[: len(parts) - child.level + 1], base]).rstrip(".")
                found.add(base)
                found.update(f"{base}.{a.name}" for a in child.names if f"{base}.{a.name}" in known)
            visit(child)

    visit(ast.parse(path.read_text()))
    return {m for m in found if m in known}


def _graph() -> dict[str, set[str]]:
    known = _modules()
    return {m: _imports(m, p, known) for m, p in known.items()}


def _reach(graph: dict[str, set[str]], start: str) -> dict[str, str]:
    """Every module ``start`` reaches, with the module that imported it (for the message)."""
    seen: dict[str, str] = {}
    stack = [start]
    while stack:
        m = stack.pop()
        for n in graph.get(m, ()):
            if n not in seen and n != start:
                seen[n] = m
                stack.append(n)
    return seen


def _chain(seen: dict[str, str], start: str, end: str) -> str:
    chain = [end]
    while chain[-1] != start and chain[-1] in seen:
        chain.append(seen[chain[-1]])
    return " <- ".join(chain)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_the_graph_is_read() -> None:
    graph = _graph()
    assert len(graph) > 100, f"only {len(graph)} modules found"
    assert "noetl.engine.decide" in graph["noetl.engine"], graph["noetl.engine"]


def test_no_role_reaches_a_forbidden_one() -> None:
    graph = _graph()
    broken: list[str] = []
    for module in graph:
        role = next((r for r in FORBIDDEN if _within(module, r)), None)
        if role is None:
            continue
        seen = _reach(graph, module)
        for target in seen:
            bad = any(_within(target, f) for f in FORBIDDEN[role])
            if role == "noetl.events" and _within(target, "noetl.dsl"):
                bad = not any(_within(target, ok) for ok in EVENTS_MAY_USE)
            if bad:
                broken.append(f"{module} reaches {target}: {_chain(seen, module, target)}")
    assert not broken, f"{len(broken)} imports cross roles the wrong way:\n" + "\n".join(sorted(broken)[:40])


def test_the_rule_check_sees_a_crossing() -> None:
    graph = {"noetl.worker.a": {"noetl.events.b"}, "noetl.events.b": {"noetl.server.c"}}
    seen = _reach(graph, "noetl.worker.a")
    assert "noetl.server.c" in seen
    chain = _chain(seen, "noetl.worker.a", "noetl.server.c")
    assert chain == "noetl.server.c <- noetl.events.b <- noetl.worker.a", chain
