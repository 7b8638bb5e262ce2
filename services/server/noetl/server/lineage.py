"""Where an execution comes from and what came of it (issue 31): its parent and children
(``kind: playbook``, SEMANTICS §13) and the reruns forked from it (``execution.forked``).

Both directions are read from the event log alone: a child's request event names its parent, a
rerun's ``execution.forked`` names its original, so the links hold on every replica and for
executions that were already finished when the link was made.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from noetl.client.projection import fold
from noetl.events import subjects as s
from noetl.events.envelope import loads
from noetl.events.port import Bus
from noetl.server.api.queries import execution_namespace, namespace_of_request

Visible = Callable[[str], bool]  # whether the caller may read a namespace (docs/security.md)

REQUESTED = s.events_named("playbook.execution.requested")
FINISHED = s.events_named("workflow.finished")
FORKED = s.events_named("execution.forked")


async def reruns_of(bus: Bus, execution_id: str, visible: Visible | None = None) -> list[dict[str, Any]]:
    """The executions forked from ``execution_id``, oldest first; with ``visible``, only those of
    namespaces it admits (a rerun may run another playbook, in another namespace)."""
    out = []
    for m in await bus.read(s.EVENTS_STREAM, [FORKED]):
        ev = loads(m.data)
        p = ev.get("payload") or {}
        if p.get("from_execution_id") == execution_id:
            if visible is not None:
                namespace = await execution_namespace(bus, str(ev.get("execution_id")))
                if namespace is None or not visible(namespace):
                    continue
            out.append(
                {
                    "execution_id": ev.get("execution_id"),
                    "from_steps": p.get("from_steps") or [],
                    "requested_at": ev.get("timestamp"),
                }
            )
    return out


async def children_of(bus: Bus, execution_id: str, visible: Visible | None = None) -> list[dict[str, Any]]:
    """The child executions ``execution_id`` started, in the order they were requested, with
    their status (``running`` until their ``workflow.finished``); with ``visible``, only those of
    namespaces it admits."""
    out: dict[str, dict[str, Any]] = {}
    for m in await bus.read(s.EVENTS_STREAM, [REQUESTED]):
        ev = loads(m.data)
        if ev.get("parent_execution_id") != execution_id or ev.get("execution_id") in out:
            continue
        p = ev.get("payload") or {}
        if visible is not None and not visible(namespace_of_request(p)):
            continue
        out[str(ev.get("execution_id"))] = {
            "execution_id": ev.get("execution_id"),
            "path": p.get("path"),
            "playbook": ev.get("entity_id"),
            "requested_at": ev.get("timestamp"),
            "status": "running",
            "iter_index": (p.get("parent_iter") or {}).get("index")
            if isinstance(p.get("parent_iter"), dict)
            else None,
        }
    if out:
        for m in await bus.read(s.EVENTS_STREAM, [FINISHED]):
            ev = loads(m.data)
            child = out.get(str(ev.get("execution_id")))
            if child is not None:
                child["status"] = (ev.get("payload") or {}).get("status") or "failed"
    return list(out.values())


async def lineage(
    bus: Bus, execution_id: str, events: list[dict[str, Any]], visible: Visible | None = None
) -> dict[str, Any]:
    """``{parent_execution_id, forked_from, children, reruns}`` of an execution whose events are
    ``events``; children and reruns in namespaces ``visible`` does not admit are left out."""
    view = fold(execution_id, events)  # the read-side projection: what the console shows too
    fp = view.forked or {}
    return {
        "execution_id": execution_id,
        "parent_execution_id": view.parent_execution_id,
        "forked_from": (
            {k: fp.get(k) for k in ("from_execution_id", "from_steps", "kept", "not_kept")}
            if view.forked is not None
            else None
        ),
        "children": await children_of(bus, execution_id, visible),
        "reruns": await reruns_of(bus, execution_id, visible),
    }
