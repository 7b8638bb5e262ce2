"""The worker pools a ``noetl run`` needs: one worker per pool its playbook names (issue 27).

A step's commands go to ``noetl.commands.<pool>`` (``spec.pool``, default ``default``); with no
worker on that pool they wait forever, and ``noetl run`` used to start a worker for ``default``
only, so a playbook with ``spec.pool: gpu`` hung without a word. The pools are read from the
playbook and from every child playbook it can see (``kind: playbook`` with a literal ``path``
found in ``--catalog DIR``); a child it cannot see (a templated path) is covered at run time by
``PoolWatch``, which starts a worker for a pool the moment a command is sent to it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from noetl.dsl.model import Playbook
from noetl.dsl.specmerge import effective_step_spec
from noetl.events import subjects as s
from noetl.events.port import Bus, Message

log = logging.getLogger("noetl.cli")


def _children(playbook: Playbook) -> list[str]:
    """The literal catalog paths of the playbook's ``kind: playbook`` tasks (workbook templates too)."""
    out: list[str] = []
    bodies: list[dict[str, Any]] = [
        dict(t.config, kind=t.kind) for step in playbook.workflow for t in step.tool
    ]
    bodies.extend(b for b in playbook.workbook.values() if isinstance(b, dict))
    for body in bodies:
        path = body.get("path")
        if body.get("kind") == "playbook" and isinstance(path, str) and "{" not in path:
            out.append(path)
    return out


def _catalog(directory: str | None) -> dict[str, Playbook]:
    """The playbooks of ``--catalog DIR`` by catalog path (``metadata.path``, else the name)."""
    from noetl.dsl.cache import parse_playbook

    found: dict[str, Playbook] = {}
    if not directory:
        return found
    for f in sorted(Path(directory).rglob("*.y*ml")):
        try:
            pb = parse_playbook(f.read_text(), str(f))
        except Exception:  # not a playbook, or invalid: the catalog skips it too
            continue
        found[pb.metadata.path or pb.metadata.name] = pb
    return found


def playbook_pools(playbook: Playbook, catalog_dir: str | None = None) -> dict[str, list[str]]:
    """Each pool the playbook and the children it can see send commands to, with the steps that
    name it (``file: step``), for the message when one cannot be served."""
    catalog = _catalog(catalog_dir)
    pools: dict[str, list[str]] = {}
    seen: set[str] = set()
    todo = [playbook]
    while todo:
        pb = todo.pop()
        key = pb.metadata.path or pb.metadata.name
        if key in seen:
            continue
        seen.add(key)
        for step in pb.workflow:
            if not step.tool:
                continue  # a router runs on the server
            pool = str(effective_step_spec(pb, step).get("pool") or s.DEFAULT_POOL)
            pools.setdefault(pool, []).append(f"{pb.file or key}: step {step.name}")
        todo.extend(catalog[path] for path in _children(pb) if path in catalog)
    pools.setdefault(s.DEFAULT_POOL, [])
    return pools


async def unserved_pools(bus: Bus, pools: dict[str, list[str]]) -> list[str]:
    """The pools the playbook's steps name that no live worker of the deployment serves (the
    runtime registry, ``noetl workers``): said at once by ``noetl exec``, since the execution
    would wait there, without a word, until a worker for the pool starts."""
    from noetl.events.runtime import list_runtime

    live = {str(w.get("pool")) for w in await list_runtime(bus, "worker")}
    return [pool for pool in sorted(pools) if pools[pool] and pool not in live]


def unserved_message(pool: str, named: list[str]) -> str:
    return (
        f"noetl: no live worker serves pool {pool!r} ({', '.join(named[:3])}): the execution waits there "
        f"until one does; start one with `noetl worker --pool {pool}` (`noetl workers` lists them)"
    )


class PoolWatch:
    """Starts a worker for a pool the moment a command is sent to one no worker serves: a child
    playbook ``noetl run`` could not see before the run names it. Commands wait in a work-queue
    stream, so the new worker takes the one that revealed the pool."""

    def __init__(self, bus: Bus, served: set[str], start: Callable[[str], Awaitable[None]]) -> None:
        self.bus, self.served, self._start = bus, set(served), start
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.bus.subscribe(s.COMMANDS_FILTER, self._on_command)

    async def _on_command(self, msg: Message) -> None:
        pool = msg.subject.rsplit(".", 1)[-1]
        if pool in self.served:
            return
        self.served.add(pool)
        await self._start(pool)

    async def stop(self) -> None:
        if self._sub is not None:
            await self._sub.unsubscribe()
