"""``secrets``: a keychain entry as a task result.

For APIs whose credentials do not fit ``auth`` (a signing key, a token inside a body): the task
hands the entry to the next tasks of the pipeline. The value is masked wherever it is persisted
or printed (SEMANTICS §12), like every keychain value; within the run it is the raw value.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from noetl.dsl.errors import KeychainUnresolvedError, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register


class SecretsTool:
    kind = "secrets"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        """``name`` (or ``key``) names the entry; ``field`` picks one field of its data."""
        name = config.get("name") if config.get("name") is not None else config.get("key")
        if not isinstance(name, str) or not name:
            return error(ToolError("secrets task needs `name`: the keychain entry to read"))
        data = ctx.keychain.get(name)
        if data is None:
            return error(KeychainUnresolvedError(
                f"keychain entry '{name}' is not resolved: declare it in the playbook's `keychain` "
                "and store it in the credential store", entry=name))
        field = config.get("field")
        if field is None:
            return ok(copy.deepcopy(data))  # later tasks may mutate their copy, not the keychain
        if not isinstance(data, Mapping) or field not in data:
            fields = sorted(str(k) for k in data) if isinstance(data, Mapping) else []
            return error(KeychainUnresolvedError(
                f"keychain entry '{name}' has no field '{field}' (fields: {', '.join(fields) or 'none'})",
                entry=name))
        return ok(copy.deepcopy(data[field]))


register(SecretsTool())
