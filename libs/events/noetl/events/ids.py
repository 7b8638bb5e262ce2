"""Deterministic ids.

Every event and command id is a function of the id of the message that caused it, so a message
that is processed twice (a redelivery, a restarted server) publishes the same ids, and
JetStream's duplicate window (``Nats-Msg-Id``) drops the repeats. No randomness here.
"""

from __future__ import annotations

import hashlib


def derive_id(*parts: object) -> str:
    h = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=16)
    return h.hexdigest()


def execution_id_for(request_id: str) -> str:
    """The sender knows the execution id as soon as it picks a request id."""
    return derive_id("execution", request_id)
