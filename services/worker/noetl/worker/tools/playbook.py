"""``playbook``: run a child execution from the catalog and wait for it (SEMANTICS §13).

The child's request id derives from the parent's command, task and attempt, so a worker that dies
and runs the task again re-attaches to the same child instead of starting a second one. Waiting
is a subscription, not a poll, and does not block the worker's other commands.
"""

from __future__ import annotations

from typing import Any

import nats.errors

from noetl.client.run import cancel, finished_event, submit
from noetl.dsl.errors import ChildExecutionError, TimeoutError_, ToolError
from noetl.events import subjects as s
from noetl.events.envelope import loads
from noetl.events.ids import derive_id, execution_id_for
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds


class PlaybookTool:
    kind = "playbook"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        services = ctx.services or {}
        nc = services.get("nc")
        if nc is None:
            return error(ToolError("the playbook kind needs a NATS connection (run it inside a worker)"))
        path = config.get("path")
        if not path:
            return error(ToolError(f"task {ctx.task}: `path` names the catalog playbook to run"))
        js = nc.jetstream()
        request_id = derive_id(
            "child", ctx.execution_id, ctx.extra.get("command_id", ""), ctx.task, ctx.attempt
        )
        child_id = execution_id_for(request_id)
        finished = s.execution_event_filter(child_id, "workflow.finished")
        sub = await nc.subscribe(finished)
        try:
            req = {
                "request_id": request_id,
                "path": path,
                "payload": config.get("args") or {},
                "parent_execution_id": ctx.execution_id,
            }
            if config.get("version") is not None:
                req["version"] = str(config["version"])
            if isinstance(ctx.extra.get("iter"), dict):  # SEMANTICS §19: the child's iter.parent
                req["parent_iter"] = ctx.extra["iter"]
            await submit(js, req)
            event = await finished_event(js, child_id)
            if event is None:
                _, read = timeout_seconds(ctx.spec)
                limit = read if read and ctx.spec.get("timeout") is not None else 10**9
                try:
                    msg = await sub.next_msg(timeout=limit)
                except nats.errors.TimeoutError:
                    await cancel(js, child_id, f"parent task {ctx.task} timed out")
                    return error(
                        TimeoutError_(
                            f"child execution {child_id} of {path!r} did not finish within {limit} s "
                            "(spec.timeout); it was cancelled",
                            child_execution_id=child_id,
                        ),
                        child={"execution_id": child_id},
                    )
                event = loads(msg.data)
        finally:
            await sub.unsubscribe()
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
