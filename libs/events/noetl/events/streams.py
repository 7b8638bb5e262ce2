"""Stream, KV and object-store declarations, created idempotently at start-up.

Every service calls ``ensure_all`` when it connects, so there is no separate set-up step and a
fresh NATS cluster works at once. The duplicate window is long (``DUPLICATE_WINDOW``) because a
server that restarts recomputes and republishes the decisions of its last inputs: their ids must
still be remembered then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import APIError, BadRequestError, NotFoundError
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from noetl.dsl.errors import DeploymentError
from noetl.events import subjects as s
from noetl.events.port import StreamConfig as PortStreamConfig
from noetl.events.retry import is_transient, retrying
from noetl.events.supervise import gather_settled

log = logging.getLogger("noetl.streams")
T = TypeVar("T")

DUPLICATE_WINDOW = 30 * 60.0  # seconds
# the event log's retention when it is created (an existing stream keeps what an operator set)
DEFAULT_EVENTS_MAX_AGE = 30 * 24 * 3600.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _duration(text: str, name: str) -> float:
    """``30d``, ``12h``, ``90m``, ``3600`` (seconds) or ``0`` (forever)."""
    text = text.strip().lower()
    try:
        if text and text[-1] in _UNITS:
            return float(text[:-1]) * _UNITS[text[-1]]
        return float(text)
    except ValueError:
        raise DeploymentError(f"{name}={text!r}: use a duration such as 30d, 12h, 90m or 0 (forever)") from (
            None
        )


def events_retention() -> tuple[float, int]:
    """(max_age seconds, max_bytes) for ``NOETL_EVENTS``: ``NOETL_EVENTS_MAX_AGE`` (default 30d;
    0 keeps events forever) and ``NOETL_EVENTS_MAX_BYTES`` (default unlimited). Older events go
    first; an execution running longer than the age loses its history, so set it above that."""
    from noetl.events.settings import setting

    age: float = setting("events_max_age")
    size: int = setting("events_max_bytes")
    return age, size if size > 0 else -1


def stream_configs(replicas: int = 1) -> list[StreamConfig]:
    max_age, max_bytes = events_retention()
    return [
        StreamConfig(
            name=s.EVENTS_STREAM,
            subjects=[s.EVENTS_FILTER],
            retention=RetentionPolicy.LIMITS,
            max_age=max_age or None,
            max_bytes=max_bytes,
            storage=StorageType.FILE,
            duplicate_window=min(DUPLICATE_WINDOW, max_age) if max_age else DUPLICATE_WINDOW,
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
        StreamConfig(
            name=s.TIMERS_STREAM,
            subjects=[s.TIMERS_FILTER],
            # a fired timer leaves when a server has recorded it; definitions wait for their time
            retention=RetentionPolicy.WORK_QUEUE,
            storage=StorageType.FILE,
            duplicate_window=DUPLICATE_WINDOW,
            num_replicas=replicas,
            allow_msg_schedules=True,  # nats-server >= 2.12 publishes each definition at its time
            allow_rollup_hdrs=True,  # a schedule's fires roll up: at most one waits (one catch-up)
            description="NoETL timers and schedules (JetStream message schedules)",
        ),
    ]


def replicas_wanted(replicas: int | None = None) -> int | None:
    """The replica count asked for: the argument, else ``NOETL_REPLICAS``, else None (create R1 and
    leave existing ones as they are, so a process started without the setting never shrinks a
    replicated deployment)."""
    if replicas is None:
        from noetl.events.settings import setting

        replicas = setting("replicas")
        if replicas is None:
            return None
    if not 1 <= replicas <= 5:
        raise DeploymentError(
            f"replicas {replicas}: JetStream keeps 1 to 5 copies of a stream; use the NATS cluster's "
            "size (3 for a 3-node cluster)"
        )
    return replicas


def replicated(replicas: int | None = None) -> bool:
    """Whether this deployment keeps more than one copy of its streams (``replicas_wanted``)."""
    return (replicas_wanted(replicas) or 1) > 1


# JetStream's answers to a replica count it can never place: insufficient resources (10023), more
# than one replica on a server that is not clustered (10074). "No suitable peers" (10005) is waited
# out instead: a cluster that is still starting its nodes answers that too
_PLACEMENT_ERR_CODES = frozenset({10023, 10074})


def _placement_error(name: str, want: int, e: APIError) -> DeploymentError:
    return DeploymentError(
        f"JetStream cannot keep {want} copies of {name} ({e.description or e}): NOETL_REPLICAS "
        f"(--replicas) must not exceed the number of JetStream nodes that are up; set it to the NATS "
        "cluster's size (1 for a single nats-server), or start the missing nodes"
    )


async def _reconcile_replicas(js: JetStreamContext, name: str, want: int | None) -> None:
    """Bring an existing stream (a KV bucket and an object store are streams too) to ``want``
    copies; JetStream moves the data itself. Refused changes name the command that does it."""
    if want is None:
        return
    info = await js.stream_info(name)
    have = info.config.num_replicas or 1
    if have == want:
        return
    log.warning("stream %s has %d replicas; changing it to %d (NOETL_REPLICAS)", name, have, want)
    try:
        await js.update_stream(info.config.evolve(num_replicas=want))
    except APIError as e:
        if is_transient(e) and e.err_code not in _PLACEMENT_ERR_CODES:
            raise
        raise DeploymentError(
            f"stream {name} has {have} replicas and NOETL_REPLICAS asks for {want}, but JetStream "
            f"refused the change ({e.description or e}); run `nats stream edit {name} --replicas {want}` "
            f"against the cluster, or set NOETL_REPLICAS={have} (a replica count above the number of "
            "JetStream nodes is never possible)"
        ) from e


async def ensure_stream(js: JetStreamContext, cfg: StreamConfig, want: int | None) -> None:
    """Create ``cfg`` when missing; an existing stream is brought to ``want`` copies."""
    name = cfg.name
    if name is None:
        raise ValueError("a stream declaration without a name")
    try:
        await js.stream_info(name)
    except NotFoundError:
        try:
            await js.add_stream(cfg)
            return
        except BadRequestError:  # another service created it between our look and our create
            await _shown(lambda: js.stream_info(name), name)
        except APIError as e:
            if e.err_code in _PLACEMENT_ERR_CODES:
                raise _placement_error(name, cfg.num_replicas or 1, e) from e
            raise
    await _reconcile_replicas(js, name, want)


def port_stream_configs() -> list[PortStreamConfig]:
    """The deployment's streams in the port's terms (what the in-memory twin declares)."""
    return [
        PortStreamConfig(
            cfg.name or "",
            tuple(cfg.subjects or ()),
            work_queue=cfg.retention == RetentionPolicy.WORK_QUEUE,
            duplicate_window=float(cfg.duplicate_window or 120.0),
            schedules=bool(cfg.allow_msg_schedules),
        )
        for cfg in stream_configs(1)
    ]


async def ensure_kept_stream(
    js: JetStreamContext, name: str, subjects: list[str], *, max_age: float, description: str,
    replicas: int | None = None,
) -> None:
    """A stream of records kept ``max_age`` seconds (an audit trail), on file, with ``replicas``
    copies (``replicas_wanted``); for stores outside the adapter that need more than the port's
    ``StreamConfig`` says."""
    want = replicas_wanted(replicas)
    cfg = StreamConfig(
        name=name,
        subjects=subjects,
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=max_age,
        num_replicas=want or 1,
        description=description,
    )
    await ensure_stream(js, cfg, want)


async def ensure_all(
    js: JetStreamContext, replicas: int | None = None, *, deadline: float | None = None
) -> None:
    """Every stream, bucket and object store, with ``replicas`` copies (see ``replicas_wanted``).

    Retried while the cluster elects leaders (a service may start before its NATS cluster is
    ready); ``deadline`` (loop time) bounds that for one-shot commands.
    """
    want = replicas_wanted(replicas)

    async def once() -> None:
        # independent declarations, sent together: one after another they were ~20 round trips
        # of a `noetl run`'s start-up
        steps: list[Awaitable[Any]] = [ensure_stream(js, cfg, want) for cfg in stream_configs(want or 1)]
        steps += [
            ensure_kv(js, bucket, history=1, replicas=want)
            for bucket in (s.ITER_BUCKET, s.CATALOG_BUCKET, s.SERVER_BUCKET, s.SCHEDULES_BUCKET)
        ]
        stores = (s.RESULTS_BUCKET, s.CATALOG_OBJECT_BUCKET)
        steps += [ensure_object_store(js, b, replicas=want) for b in stores]
        await gather_settled(*steps)

    # a stream another service has just created may not show on our node for a moment (404)
    await retrying(once, "declaring streams and buckets", deadline=deadline, also=(NotFoundError,))


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    """A durable consumer shared by every replica: created by whichever replica comes first. An
    existing one keeps its delivery state (what the replicas share) and takes this version's
    redelivery settings: an older one's ``max_deliver`` 5 dropped commands nak'ed through an
    election."""
    name = config.durable_name or ""
    try:
        info = await js.consumer_info(stream, name)
    except NotFoundError:
        try:
            await js.add_consumer(stream, config)
            return
        except BadRequestError:
            info = await js.consumer_info(stream, name)  # another replica won the race
    have = info.config
    if (have.max_deliver, have.ack_wait) != (config.max_deliver, config.ack_wait):
        await js.add_consumer(stream, have.evolve(max_deliver=config.max_deliver, ack_wait=config.ack_wait))


async def ensure_kv(
    js: JetStreamContext,
    bucket: str,
    *,
    history: int = 1,
    replicas: int | None = None,
    ttl: float | None = None,
    memory: bool = False,
) -> KeyValue:
    """Open a bucket, creating it when missing; an existing one is brought to ``replicas`` copies
    (``NOETL_REPLICAS`` when None), its other settings kept."""
    want = replicas_wanted(replicas)
    cfg = KeyValueConfig(
        bucket=bucket,
        history=history,
        replicas=want or 1,
        ttl=ttl,
        storage=StorageType.MEMORY if memory else StorageType.FILE,
    )
    return await _open_or_create(
        js, f"KV_{bucket}", want, lambda: js.key_value(bucket), lambda: js.create_key_value(cfg)
    )


async def _shown(read: Callable[[], Awaitable[T]], name: str) -> T:
    """What another service has just created: a node that has not applied the creation yet
    answers 404 for a moment."""
    deadline = asyncio.get_running_loop().time() + 10
    return await retrying(read, f"opening {name}", also=(NotFoundError,), deadline=deadline)


async def _open_or_create(
    js: JetStreamContext,
    stream: str,
    want: int | None,
    open_: Callable[[], Awaitable[T]],
    create: Callable[[], Awaitable[T]],
) -> T:
    """A bucket or object store: opened, else created (another service may win the race), and in
    both cases brought to ``want`` copies."""
    try:
        got = await open_()
    except NotFoundError:
        try:
            return await create()
        except BadRequestError:  # another service created it first
            got = await _shown(open_, stream)
        except APIError as e:
            if e.err_code in _PLACEMENT_ERR_CODES:
                raise _placement_error(stream, want or 1, e) from e
            raise
    await _reconcile_replicas(js, stream, want)
    return got


def results_max_age() -> float:
    """Seconds results stored by reference (``noetl_results``) are kept: ``NOETL_RESULTS_MAX_AGE``,
    by default as long as the events that name them (``NOETL_EVENTS_MAX_AGE``, 30d); 0 forever.
    Results are task outputs, often data a playbook fetched with a credential: they must not
    outlive the log that is the only way to find them."""
    from noetl.events.settings import setting

    age: float | None = setting("results_max_age")
    return age if age is not None else float(setting("events_max_age"))


async def ensure_object_store(
    js: JetStreamContext, bucket: str, *, replicas: int | None = None
) -> ObjectStore:
    want = replicas_wanted(replicas)
    age = results_max_age() if bucket == s.RESULTS_BUCKET else 0.0
    store = await _open_or_create(
        js,
        f"OBJ_{bucket}",
        want,
        lambda: js.object_store(bucket),
        # the name goes first: nats-py drops a bucket given only inside ObjectStoreConfig
        lambda: js.create_object_store(bucket, replicas=want or 1, ttl=age or None),
    )
    if age:
        await _reconcile_max_age(js, f"OBJ_{bucket}", age)
    return store


async def _reconcile_max_age(js: JetStreamContext, name: str, age: float) -> None:
    """An object store created before it had an age limit gets one (JetStream applies it to
    what is stored already)."""
    info = await js.stream_info(name)
    have = info.config.max_age or 0
    if abs(have - age) > 1:
        log.info("stream %s: max_age %ss -> %ss (NOETL_RESULTS_MAX_AGE)", name, have, age)
        await js.update_stream(info.config.evolve(max_age=age))
