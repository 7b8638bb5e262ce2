"""The console's actions on an execution (pause, resume, cancel, signal, approve, reject): which
a view offers and what each sends. Used by ``noetl.server.console.pages``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from noetl.client.run import cancel as request_cancel
from noetl.client.run import pause as request_pause
from noetl.client.run import resume as request_resume
from noetl.client.run import signal as request_signal
from noetl.dsl.errors import RequestInvalidError, reply_error
from noetl.server.console.fold import ExecutionView


@dataclass(frozen=True)
class Action:
    """A control on the execution page (cancel, pause, resume, signal); the page shows whichever
    apply to the execution's status. ``fields`` are what its form posts besides the request id
    (a signal needs a name and its data; the buttons post nothing)."""

    name: str
    label: str
    shown_when: frozenset[str]
    confirm: str
    run: Callable[[Any, str, dict[str, str]], Awaitable[dict[str, Any] | None]]
    fields: tuple[str, ...] = ()


_BY = "\0principal"  # the form key an action's caller rides under: no browser field can be named so


async def _cancel(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await request_cancel(bus, execution_id, "cancelled from the console", principal=form.get(_BY))


async def _outside(out: dict[str, Any]) -> dict[str, Any] | None:
    """None (the page's 404) for an execution that does not exist; a refusal otherwise is kept, so
    the page can say why (a signal's bad name or data)."""
    return None if (out.get("error") or {}).get("kind") == "not_found" else out


async def _pause(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    out = await request_pause(bus, execution_id, "paused from the console", principal=form.get(_BY))
    return await _outside(out)


async def _resume(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _outside(await request_resume(bus, execution_id, principal=form.get(_BY)))


async def _signal(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    """The signal form: its data is JSON (empty sends none); the request id the page was rendered
    with makes a double click one signal, not a second one queued for the next wait."""
    text = (form.get("data") or "").strip()
    try:
        data = json.loads(text) if text else None
    except ValueError as e:
        return reply_error(RequestInvalidError(f"the signal's data is not JSON: {e}"))
    name = (form.get("signal") or "").strip()
    return await _outside(
        await request_signal(
            bus, execution_id, name, data, form.get("request_id") or None, principal=form.get(_BY)
        )
    )


async def _answer(bus: Any, execution_id: str, form: dict[str, str], approved: bool) -> dict[str, Any] | None:
    """Approve / Reject: the signal the step waits for, with ``{"approved": ..., "by": ...}``;
    ``by`` is the signed-in principal (the page sets it, never the form)."""
    name = (form.get("signal") or "").strip()
    by = form.get(_BY) or "anonymous"
    data = {"approved": approved, "by": by}
    request_id = form.get("request_id") or None
    out = await request_signal(bus, execution_id, name, data, request_id, principal=form.get(_BY))
    return await _outside(out)


async def _approve(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _answer(bus, execution_id, form, True)


async def _reject(bus: Any, execution_id: str, form: dict[str, str]) -> dict[str, Any] | None:
    return await _answer(bus, execution_id, form, False)


ACTIONS: dict[str, Action] = {
    "pause": Action(
        "pause", "Pause", frozenset({"running"}), "Pause: schedule nothing new until resumed?", _pause
    ),
    "resume": Action("resume", "Resume", frozenset({"running"}), "Resume this execution?", _resume),
    "cancel": Action("cancel", "Cancel", frozenset({"running"}), "Cancel this execution?", _cancel),
    "signal": Action(
        "signal", "Send signal", frozenset({"running"}), "Send this signal?", _signal, ("signal", "data")
    ),
    "approve": Action("approve", "Approve", frozenset({"running"}), "Approve?", _approve, ("signal",)),
    "reject": Action("reject", "Reject", frozenset({"running"}), "Reject?", _reject, ("signal",)),
}


_WAIT_ACTIONS = ("signal", "approve", "reject")  # shown only while a step run waits for a signal


# what the page says when an action is refused, by error kind (as the API answers)
_REFUSED = {"request_invalid": 400, "execution_finished": 409, "signal_not_awaited": 409}


def actions_for(view: ExecutionView) -> list[Action]:
    if view.finished_at is not None:
        return []
    return [
        a
        for a in ACTIONS.values()
        if view.status in a.shown_when
        and not (a.name in ("cancel", *_WAIT_ACTIONS) and view.cancel_requested)
        and not (a.name in _WAIT_ACTIONS and not view.waiting)
        and not (a.name == "pause" and (view.paused or view.cancel_requested))
        and not (a.name == "resume" and not view.paused)
    ]
