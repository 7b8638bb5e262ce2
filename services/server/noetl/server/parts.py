"""What the server's parts share: the ``Server``'s state, declared once for the modules that
each hold one part of its work (``noetl.server.storing``: storing decisions and the checkpoint;
``noetl.server.partitions``: reading and deciding a partition's inputs;
``noetl.server.intake``: the requests loop). ``noetl.server.service.Server`` assembles them and
sets every attribute declared here in its constructor and ``start``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from noetl.engine import ExecutionState
from noetl.events.envelope import Event
from noetl.events.port import Bus, KeyValue
from noetl.server.lanes import SlowLanes
from noetl.server.leases import PartitionLeases
from noetl.server.requests import RequestHandler
from noetl.store.catalog import Catalog

BATCH = 256
CHECKPOINT_EVERY = 0.1  # seconds
# events someone waits for (clients follow an execution to its end): acknowledged one by one
WAITED_FOR = frozenset({"workflow.finished", "playbook.processed"})
# a request taken by a replica that then died goes to another one after this many seconds
REQUEST_ACK_WAIT = 10.0
# how long a rebuild waits for its reader to deliver the input being decided before reading again
REBUILD_PATIENCE = 15.0
# an owned partition whose reader is being opened again for longer than this is reported without one
READER_GRACE = 10.0


class ServerParts:
    """The state the parts of ``Server`` read and write (annotations only: ``Server`` sets them)."""

    bus: Bus
    kv: KeyValue  # noetl_server: checkpoints, the partition count
    iter_kv: KeyValue  # noetl_iter: loop iteration snapshots
    catalog: Catalog
    requests: RequestHandler
    member: str
    _ack_all: bool
    states: dict[str, ExecutionState]
    _state_partition: dict[str, int]
    _loops: dict[int, asyncio.Task[None]]
    _stopping: asyncio.Event
    decided: int
    _unsaved: dict[int, int]
    _next_save: dict[int, float]
    _readers: int
    reader_restarts: int
    _reading: dict[int, tuple[bool, float]]
    _background: set[asyncio.Task[None]]
    leases: PartitionLeases | None
    lanes: SlowLanes
    observer: Callable[[Event], None] | None
