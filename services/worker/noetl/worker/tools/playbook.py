"""``playbook``: run a child execution from the catalog and wait for it (SEMANTICS §13).

The child's request id derives from the parent's command, task and attempt, so a worker that dies
and runs the task again re-attaches to the same child instead of starting a second one. Waiting
is a subscription, not a poll, and does not block the worker's other commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl.client.run import Awaited, cancel, submit
from noetl.dsl.errors import ChildExecutionError, TimeoutError_, ToolError
from noetl.events.ids import derive_id, execution_id_for
from noetl.events.masking import Masker
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds


def child_payload(args: dict[str, Any], keychain: Mapping[str, Any]) -> dict[str, Any]:
    """The child's payload with every value derived from the parent's keychain masked as ``***``.

    The request becomes the child's ``playbook.execution.requested``, which the API, the console
    and ``noetl logs`` show to every reader of the child, and the server never masks (it holds no
    secret): a secret passed here would be stored in clear for the event log's lifetime. A child
    that needs the credential declares it in its own ``keychain``, where its scope is checked."""
    return Masker(keychain).mask(args) if keychain else args


class PlaybookTool:
    kind = "playbook"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        services = ctx.services or {}
        bus = services.get("bus")
        if bus is None:
            return error(ToolError("the playbook kind needs the worker's bus (run it inside a worker)"))
        path = config.get("path")
        if not path:
            return error(ToolError(f"task {ctx.task}: `path` names the catalog playbook to run"))
        request_id = derive_id(
            "child", ctx.execution_id, ctx.extra.get("command_id", ""), ctx.task, ctx.attempt
        )
        child_id = execution_id_for(request_id)
        awaited = await Awaited.open(bus, child_id, "workflow.finished")
        try:
            req = {
                "request_id": request_id,
                "path": path,
                "payload": child_payload(config.get("args") or {}, ctx.keychain),
                "parent_execution_id": ctx.execution_id,
            }
            if config.get("version") is not None:
                req["version"] = str(config["version"])
            if isinstance(ctx.extra.get("iter"), dict):  # SEMANTICS §19: the child's iter.parent
                req["parent_iter"] = ctx.extra["iter"]
            await submit(bus, req)
        except BaseException:
            await awaited.close()
            raise
        _, read = timeout_seconds(ctx.spec)
        limit = read if read and ctx.spec.get("timeout") is not None else None
        try:
            event = await awaited.wait(limit)
        except TimeoutError:
            await cancel(bus, child_id, f"parent task {ctx.task} timed out")
            return error(
                TimeoutError_(
                    f"child execution {child_id} of {path!r} did not finish within {limit} s "
                    "(spec.timeout); it was cancelled",
                    child_execution_id=child_id,
                ),
                child={"execution_id": child_id},
            )
        payload = event.get("payload") or {}
        if payload.get("status") == "success":
            return ok(payload.get("result"), child={"execution_id": child_id})
        cause = payload.get("error") or {}
        return error(
            ChildExecutionError(
                f"child execution {child_id} of {path!r} failed: {cause.get('kind')}: {cause.get('message')}",
                child_execution_id=child_id,
                cause=cause,
            ),
            child={"execution_id": child_id},
        )


register(PlaybookTool())
