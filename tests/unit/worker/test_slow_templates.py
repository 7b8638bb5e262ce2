"""Which template calls send an execution's template work to a thread (``Pipeline._cpu``).

Only a call that itself spent more than ``SLOW_RENDER_S`` of CPU does: not one that waited on
the wall clock (the process descheduled on a loaded machine), and not one during which the
garbage collector ran (its pause belongs to the whole heap, not to the template).
"""

from __future__ import annotations

import gc
import time
import uuid
from types import SimpleNamespace

import pytest

from noetl.worker import pipeline
from noetl.worker.pipeline import SLOW_RENDER_S, Pipeline


def _burn(seconds: float, collect: bool = False) -> int:
    began = time.thread_time()
    while time.thread_time() - began < seconds:
        pass
    if collect:
        gc.collect()
    return 1


def _wait(seconds: float) -> int:
    time.sleep(seconds)
    return 1


async def _judged_slow(fn: object) -> bool:
    owner = SimpleNamespace(execution_id=uuid.uuid4().hex)
    assert await Pipeline._cpu(owner, fn) == 1  # type: ignore[arg-type]
    return owner.execution_id in pipeline._SLOW_EXECUTIONS


@pytest.mark.parametrize(
    ("fn", "slow"),
    [
        (lambda: _burn(SLOW_RENDER_S * 2), True),
        (lambda: _burn(SLOW_RENDER_S * 2, collect=True), False),
        (lambda: _wait(SLOW_RENDER_S * 2), False),
        (lambda: 1, False),
    ],
    ids=["cpu-bound", "gc-ran", "waited", "quick"],
)
async def test_only_a_call_that_spent_the_cpu_itself_is_slow(fn: object, slow: bool) -> None:
    assert await _judged_slow(fn) is slow
