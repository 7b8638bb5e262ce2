"""Rerun (issue 31): a new execution forked from a recorded one's log.

The adapter half: it reads the original's events (and the playbook text, from the catalog when
the request event only names it), has the pure ``engine.fork.plan_fork`` say where the new
execution starts and what it keeps, and builds the request. The new execution's request event
carries the fork (ctx, each forked run's ``args`` and arc event), so the engine starts it from
there with no I/O of its own, and its ``execution.forked`` event records the lineage. The CLI,
the HTTP API and the console all go through ``prepare_rerun``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from noetl.dsl.cache import digest_of
from noetl.dsl.errors import NoSuchEntityError, RerunRefusedError, reply_error
from noetl.dsl.specmerge import deep_merge
from noetl.engine.fork import ForkPlan, plan_fork
from noetl.events.bus import read_execution_events
from noetl.events.port import Bus
from noetl.store.principals import Principal


@dataclass
class Rerun:
    """A prepared rerun: the plan (what is kept and what is not, said before it runs) and the
    request that starts it."""

    plan: ForkPlan
    request: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.plan.to_dict(),
            "request_id": self.request["request_id"],
            "path": self.request.get("path"),
            "version": self.request.get("version"),
            "payload": self.request.get("payload"),
        }


async def prepare_rerun(
    bus: Bus,
    catalog: Any,
    execution_id: str,
    *,
    from_step: str | None = None,
    payload: dict[str, Any] | None = None,
    playbook: str | None = None,
    version: str | None = None,
    request_id: str | None = None,
) -> Rerun | dict[str, Any]:
    """The rerun of ``execution_id``, or ``{"error": ...}`` saying why it cannot be forked.

    ``payload`` is merged over the original request's payload (give only what changes);
    ``playbook`` (YAML text) or ``version`` (of the original's catalog path) replaces the playbook.
    """
    events = await read_execution_events(bus, execution_id)
    requested = next((e for e in events if e.get("name") == "playbook.execution.requested"), None)
    if not events:
        return reply_error(NoSuchEntityError(f"no execution {execution_id}: check the id (noetl executions)"))
    if requested is None:
        return reply_error(
            RerunRefusedError(
                f"execution {execution_id} was rejected before it ran (no recorded request): fix the request "
                "and start it again"
            )
        )
    try:
        events = [await catalog.with_playbook_text(e) for e in events]
    except LookupError as e:
        return reply_error(RerunRefusedError(f"{e}: rerun it with --playbook FILE"))
    rp = requested.get("payload") or {}
    recorded_text = next(
        e["payload"]["playbook"] for e in events if e.get("name") == "playbook.execution.requested"
    )
    request: dict[str, Any] = {
        "request_id": request_id or uuid.uuid4().hex,
        "payload": deep_merge(dict(rp.get("payload") or {}), payload or {}),
    }
    new_text = await _playbook_of_rerun(
        catalog, execution_id, requested, recorded_text, request, playbook, version
    )
    if isinstance(new_text, dict):
        return new_text
    plan = plan_fork(events, from_step, new_text)
    if plan.problem is not None:
        return reply_error(RerunRefusedError(plan.problem))
    request["fork"] = plan.fork_payload()
    return Rerun(plan, request)


async def _playbook_of_rerun(
    catalog: Any,
    execution_id: str,
    requested: Mapping[str, Any],
    recorded_text: str,
    request: dict[str, Any],
    playbook: str | None,
    version: str | None,
) -> str | dict[str, Any] | None:
    """Set what ``request`` runs: the given text, the given catalog version, the original catalog
    entry when it still holds the recorded text (credential scopes follow the path), else the
    recorded text. Returns the text given or read from the catalog (the plan checks the fork
    against it), None when the recorded text runs, or the refusal."""
    rp = requested.get("payload") or {}
    orig_path, orig_version = rp.get("path"), rp.get("version")
    if playbook is not None:
        request["playbook"] = playbook
        return playbook
    if version is not None:
        if not orig_path:
            return reply_error(
                RerunRefusedError(
                    f"execution {execution_id} ran an inline playbook, which has no catalog versions: "
                    "rerun it with --playbook FILE"
                )
            )
        new_text: str | None = await catalog.get(str(orig_path), str(version))
        if new_text is None:
            return reply_error(
                RerunRefusedError(
                    f"no playbook {orig_path!r} version {version} in the catalog: register it "
                    "(noetl catalog register FILE) or rerun with --playbook FILE"
                )
            )
        request.update(path=orig_path, version=str(version))
        return new_text
    if orig_path and str(rp.get("file") or "").startswith("catalog:"):
        # the same catalog entry when it still holds the recorded text (credential scopes follow
        # the path), else the recorded text itself
        current = await catalog.get(str(orig_path), str(orig_version) if orig_version else None)
        if current is not None and digest_of(current) == rp.get("digest"):
            request.update(path=orig_path, **({"version": str(orig_version)} if orig_version else {}))
            return None
    request["playbook"] = recorded_text
    return None


def rerun_options(body: dict[str, Any]) -> dict[str, Any] | str:
    """``prepare_rerun``'s keyword arguments from a rerun request's body (the HTTP API's and the
    NATS service's: ``{from?, payload?, playbook? | version?, request_id?}``), or why it is not one."""
    payload, playbook, version = body.get("payload"), body.get("playbook"), body.get("version")
    if payload is not None and not isinstance(payload, dict):
        return "`payload` must be a JSON object (merged over the original's)"
    if playbook is not None and not isinstance(playbook, str):
        return "`playbook` must be the playbook's YAML text"
    if playbook is not None and version is not None:
        return "give `playbook` or `version`, not both"
    return {
        "from_step": str(body["from"]) if body.get("from") else None,
        "payload": payload,
        "playbook": playbook,
        "version": str(version) if version is not None else None,
        "request_id": str(body["request_id"]) if body.get("request_id") else None,
    }


async def start_rerun(requests: Any, rerun: Rerun, principal: Principal | None) -> dict[str, Any]:
    """Record the rerun's request through the server's request handler. With ``principal`` (the
    HTTP API, the NATS service, the console: each has checked first that it may act on the
    original) it is checked like any request of that principal, so it must also be one that may
    start executions in the new execution's namespace; ``forked`` lets it carry the ``fork`` that
    no request from outside may set."""
    data = json.dumps(rerun.request).encode()
    reply: dict[str, Any] = await requests.handle(
        data, rerun.request["request_id"], principal=principal, forked=True
    )
    return reply
