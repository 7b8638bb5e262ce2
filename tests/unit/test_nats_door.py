"""The bus port is the only door to NATS (issue 28): nats-py is imported by the adapter's modules
alone, so what crosses the port is ``noetl.events.port``'s types and errors.

The adapter is the list below (docs/architecture.md, "The port"); the NATS micro service
(``noetl.server.api.micro``) speaks NATS's own service protocol and stays on nats-py by design.
Every import counts, inside functions and ``TYPE_CHECKING`` blocks too.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOTS = [ROOT / "libs/dsl", ROOT / "libs/events", ROOT / "services/server", ROOT / "services/worker"]

ADAPTER = frozenset(
    {
        "noetl.events.nats_port",
        "noetl.events.nats_errors",
        "noetl.events.nats_handles",
        "noetl.events.bus",
        "noetl.events.connection",
        "noetl.events.outbox",
        "noetl.events.publisher",
        "noetl.events.puller",
        "noetl.events.streams",
        "noetl.events.runtime",
        "noetl.events.retry",
        # NATS's own service protocol (nats.micro), not the bus: it may stay
        "noetl.server.api.micro",
        "noetl.server.api.micro_reads",  # its read endpoints, same protocol
    }
)


def _module(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_nats(name: str | None) -> bool:
    return name is not None and (name == "nats" or name.startswith("nats."))


def _imports_nats(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(_is_nats(n) for n in names):
            lines.append(node.lineno)
    return lines


def test_only_the_adapter_imports_nats() -> None:
    found = []
    for root in ROOTS:
        for path in sorted((root / "noetl").rglob("*.py")):
            module = _module(root, path)
            if module in ADAPTER:
                continue
            found += [f"{path.relative_to(ROOT)}:{line}" for line in _imports_nats(path)]
    assert not found, "nats-py imported outside the adapter (use noetl.events.port): " + ", ".join(found)


def test_the_adapter_list_is_current() -> None:
    modules = {_module(root, p) for root in ROOTS for p in (root / "noetl").rglob("*.py")}
    assert modules >= ADAPTER, sorted(ADAPTER - modules)
