"""``noop``: a task that does nothing but pass a value on.

Used to route (its policy decides a ``jump``), to set ctx, or to give a pipeline a fixed result.
"""

from __future__ import annotations

from typing import Any

from noetl.worker.tools.base import ToolContext, ok, register


class NoopTool:
    kind = "noop"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """The rendered ``result`` field when given (even ``null``), else ``_prev`` unchanged."""
        if "result" in config:
            return ok(config["result"])
        return ok(ctx.extra.get("prev"))


register(NoopTool())
