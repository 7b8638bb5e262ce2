"""The cyclic garbage collector held off while ``noetl run`` starts.

Start-up allocates hundreds of thousands of long-lived objects (modules, pydantic models, the
validator's checks) and almost no garbage, yet the collector, counting allocations, walked that
growing heap over and over while it was built: ~50 ms of a one-step run's ~460 (A/B in
docs/performance.md). So the collector is off from the command's start until the private server
and worker run, and what start-up built is then frozen out of its view (``gc.freeze``, as the
services do once started), so later collections walk only what the execution allocates.
``NOETL_GC_TUNE=false`` leaves the collector as Python sets it.
"""

from __future__ import annotations

import gc

_held = False


def hold() -> None:
    """Off until ``release``; a process whose collector is already off is left as it is."""
    global _held
    from noetl.events.settings import setting

    if not _held and gc.isenabled() and setting("gc_tune"):
        gc.disable()
        _held = True


def release() -> None:
    """On again, with the start-up heap frozen; safe to call more than once."""
    global _held
    if _held:
        _held = False
        gc.freeze()
        gc.enable()
