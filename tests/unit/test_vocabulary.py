"""The wire's vocabulary (issue 28): the event names of ``noetl.events.vocabulary`` are the ones
the NATS contract documents, and its groups are the engine's inputs."""

from __future__ import annotations

import re
from pathlib import Path

from noetl.events import subjects, vocabulary

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "nats-contract.md"


def _documented_names() -> set[str]:
    text = CONTRACT.read_text()
    section = text[text.index("### Events") :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    names: set[str] = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([a-z_.]+)`", line.split("|")[1]))
    return names


def test_every_event_name_is_documented_and_every_documented_name_declared() -> None:
    assert _documented_names() == vocabulary.EVENT_NAMES


def test_the_engine_inputs_are_the_outside_inputs_and_the_workers_terminal_events() -> None:
    inputs = set(vocabulary.SERVER_INPUT_EVENTS)
    assert inputs == set(vocabulary.OUTSIDE_INPUTS) | set(vocabulary.WORKER_TERMINAL_EVENTS)
    assert inputs <= vocabulary.EVENT_NAMES
    assert subjects.SERVER_INPUT_EVENTS == vocabulary.SERVER_INPUT_EVENTS
