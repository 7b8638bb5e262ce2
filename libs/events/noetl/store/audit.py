"""The credential audit trail: stream ``NOETL_AUDIT``, subject ``noetl.audit.credentials``.

Reading a secret's value (through the API, or by a worker for a command whose playbook declares
it) is the one operation whose record must outlive the process that served it, so it goes to
its own stream (own retention, own permissions) and not to
the event log, which users read freely. A record says who, when, what and for which execution:
never the value, nor the token itself (only a hash prefix that identifies it).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from noetl.events.clock import utc_now
from noetl.events.nats_port import NatsBus, as_bus
from noetl.events.port import Bus
from noetl.events.port import StreamConfig as PortStream
from noetl.events.streams import ensure_stream, replicas_wanted

AUDIT_STREAM = "NOETL_AUDIT"
AUDIT_FILTER = "noetl.audit.>"
CREDENTIALS_AUDIT_SUBJECT = "noetl.audit.credentials"
AUDIT_MAX_AGE = 365 * 24 * 3600.0  # a year: audit trails are kept long


def token_id(token: str | None) -> str:
    """Names a token in records and logs without giving it away."""
    if not token:
        return "anonymous"
    return "token:" + hashlib.sha256(token.encode()).hexdigest()[:12]


async def ensure_audit_stream(js: Any, replicas: int | None = None) -> None:
    """``js``: a nats-py JetStream context, or a bus port (the in-memory twin declares the stream
    by name and subjects; retention is NATS's business)."""
    bus = as_bus(js)
    if not isinstance(bus, NatsBus):  # the twin: the stream by name and subjects
        await bus.add_stream(PortStream(AUDIT_STREAM, (AUDIT_FILTER,)))
        return
    js = bus.js
    want = replicas_wanted(replicas)
    cfg = StreamConfig(
        name=AUDIT_STREAM,
        subjects=[AUDIT_FILTER],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=AUDIT_MAX_AGE,
        num_replicas=want or 1,
        description="NoETL audit trail: who read which credential, when, for which execution",
    )
    await ensure_stream(js, cfg, want)


async def record_credential_access(
    js: Bus | JetStreamContext,
    *,
    action: str,
    credential: str,
    who: str,
    outcome: str,
    execution_id: str | None = None,
    parent_execution_id: str | None = None,
    kind: str | None = None,
    remote: str | None = None,
    audit_id: str | None = None,
) -> dict[str, Any]:
    """Store one record and wait for its ack: an unrecorded read must not be served."""
    record = {
        "audit_id": audit_id or uuid.uuid4().hex,
        "timestamp": utc_now(),
        "action": action,
        "credential": credential,
        "kind": kind,
        "who": who,
        "outcome": outcome,
        "execution_id": execution_id,
        "parent_execution_id": parent_execution_id,
        "remote": remote,
    }
    data = json.dumps(record).encode()
    await as_bus(js).publish(CREDENTIALS_AUDIT_SUBJECT, data, msg_id=record["audit_id"])
    return record


ACTIONS_AUDIT_SUBJECT = "noetl.audit.actions"


async def record_action(
    bus: Any,
    *,
    action: str,
    principal: str,
    target: str,
    outcome: str = "done",
    namespace: str | None = None,
    **details: Any,
) -> dict[str, Any]:
    """One record of who changed what (a catalog write, a schedule change, a signal, pause, resume
    or cancel) on ``noetl.audit.actions``: the event log says what happened to an execution, this
    trail says who asked, kept as long as the credential trail. Never a value or a token."""
    record = {
        "audit_id": uuid.uuid4().hex,
        "timestamp": utc_now(),
        "action": action,
        "principal": principal,
        "target": target,
        "namespace": namespace,
        "outcome": outcome,
        **details,
    }
    await as_bus(bus).publish(ACTIONS_AUDIT_SUBJECT, json.dumps(record).encode(), msg_id=record["audit_id"])
    return record
