"""How an execution ends on the wire: ``workflow.finished`` then ``playbook.processed``.

One definition for every way an execution ends: the engine when no token is left, the request
adapter when it rejects a request, the server when JetStream refuses a decision for good. A
client waiting on either event reads the same shape whichever path wrote it.
"""

from __future__ import annotations

from noetl.events.vocabulary import EntityType, EventName, Status


def ending(
    status: str, *, result: object = None, error: dict[str, object] | None = None, ctx: object = None
) -> list[tuple[EventName, EntityType, Status, dict[str, object]]]:
    """``(name, entity_type, event status, payload)`` of the two closing events, in order."""
    outcome: Status = "success" if status == "success" else "error"
    return [
        (
            "workflow.finished",
            "workflow",
            outcome,
            {"status": status, "result": result, "error": error, "ctx": ctx if ctx is not None else {}},
        ),
        ("playbook.processed", "playbook", outcome, {"status": status}),
    ]
