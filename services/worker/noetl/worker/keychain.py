"""A command's keychain: the credentials its playbook declares, read for the command.

Every credential a command reads is recorded in ``NOETL_AUDIT`` first (the record's id derives
from the command's, so a redelivered command records its use once).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from noetl.dsl.model import Playbook
from noetl.events.envelope import Command
from noetl.events.ids import derive_id
from noetl.events.port import Bus
from noetl.events.retry import retrying
from noetl.host import logs
from noetl.store.audit import record_credential_access


async def read_keychain(
    bus: Bus, credentials: Any, worker_id: str, playbook: Playbook, cmd: Command
) -> tuple[dict[str, Any], dict[str, str | None]]:
    """The values and their kinds (the kind says what of an entry is secret:
    noetl.events.masking). ``credentials``: the credential store, or None when there is none."""
    out: dict[str, Any] = {}
    kinds: dict[str, str | None] = {}
    for entry in playbook.keychain:
        # partial, not a lambda: binds this entry (a closure would see the loop's last one)
        got = (
            await retrying(partial(credentials.get, entry.name), "reading a credential")
            if credentials
            else None
        )
        if got is not None:
            await retrying(
                partial(
                    record_credential_access,
                    bus,
                    action="credential.use",
                    credential=entry.name,
                    who=f"worker:{worker_id}",
                    outcome="granted",
                    execution_id=cmd.get("execution_id"),
                    parent_execution_id=cmd.get("parent_execution_id"),
                    kind=got.get("kind"),
                    audit_id=derive_id(cmd["command_id"], "credential", entry.name),
                ),
                "recording a credential use",
            )
            out[entry.name] = got.get("data", got)
            # the declared kind, which the server checked against the stored one at the start
            # (keychain_kind_mismatch), decides what of the entry is secret
            kinds[entry.name] = entry.kind or got.get("kind")
    logs.register_keychain(out, kinds)
    return out, kinds
