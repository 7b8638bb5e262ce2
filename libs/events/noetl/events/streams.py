"""Stream, KV and object-store declarations, created idempotently at start-up.

Every service calls ``ensure_all`` when it connects, so there is no separate set-up step and a
fresh NATS cluster works at once. The duplicate window is long (``DUPLICATE_WINDOW``) because a
server that restarts recomputes and republishes the decisions of its last inputs: their ids must
still be remembered then.
"""

from __future__ import annotations

from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.object_store import ObjectStore

from noetl.events import subjects as s

DUPLICATE_WINDOW = 30 * 60.0  # seconds


def stream_configs(replicas: int = 1) -> list[StreamConfig]:
    return [
        StreamConfig(
            name=s.EVENTS_STREAM,
            subjects=[s.EVENTS_FILTER],
            retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW,
            num_replicas=replicas,
            description="NoETL event log: every execution's events, in order",
        ),
        StreamConfig(
            name=s.COMMANDS_STREAM,
            subjects=[s.COMMANDS_FILTER],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW,
            num_replicas=replicas,
            description="NoETL commands: one step run or loop iteration per message",
        ),
        StreamConfig(
            name=s.REQUESTS_STREAM,
            subjects=[s.REQUESTS_FILTER],
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW,
            num_replicas=replicas,
            description="NoETL execution requests (fire-and-forget, request_id dedupe)",
        ),
    ]


async def _ensure_stream(js: JetStreamContext, cfg: StreamConfig) -> None:
    try:
        await js.stream_info(cfg.name)
    except NotFoundError:
        try:
            await js.add_stream(cfg)
        except BadRequestError:
            # another service created it between our look and our create
            await js.stream_info(cfg.name)


async def ensure_all(js: JetStreamContext, replicas: int = 1) -> None:
    for cfg in stream_configs(replicas):
        await _ensure_stream(js, cfg)
    for bucket, history in ((s.ITER_BUCKET, 1), (s.CATALOG_BUCKET, 1), (s.SERVER_BUCKET, 1)):
        await ensure_kv(js, bucket, history=history, replicas=replicas)
    for bucket in (s.RESULTS_BUCKET, s.CATALOG_OBJECT_BUCKET):
        await ensure_object_store(js, bucket, replicas=replicas)


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """A durable consumer shared by every replica: created by whichever replica comes first; an
    existing one is kept as it is (its delivery state is what the replicas share)."""
    try:
        await js.consumer_info(stream, config.durable_name or "")
    except NotFoundError:
        try:
            await js.add_consumer(stream, config)
        except BadRequestError:
            await js.consumer_info(stream, config.durable_name or "")  # another replica won the race


async def ensure_kv(js: JetStreamContext, bucket: str, *, history: int = 1, replicas: int = 1):
    try:
        return await js.key_value(bucket)
    except NotFoundError:
        return await js.create_key_value(
            KeyValueConfig(bucket=bucket, history=history, replicas=replicas, storage=StorageType.FILE)
        )


async def ensure_object_store(js: JetStreamContext, bucket: str, *, replicas: int = 1) -> ObjectStore:
    try:
        return await js.object_store(bucket)
    except NotFoundError:
        try:
            # the name goes first: nats-py drops a bucket given only inside ObjectStoreConfig
            return await js.create_object_store(bucket, replicas=replicas)
        except BadRequestError:
            return await js.object_store(bucket)  # another service created it first
