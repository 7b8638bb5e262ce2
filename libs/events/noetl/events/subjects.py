"""Every subject, stream, consumer and bucket name of the public NATS contract.

Users script against these names (``nats stream view NOETL_EVENTS``, ``nats sub
'noetl.events.*.*.workflow.finished'``), so they are API: this is the only module that builds or
parses them, and ``docs/nats-contract.md`` lists them. Change them only on purpose.
"""

from __future__ import annotations

from noetl.events import vocabulary

EVENTS_STREAM = "NOETL_EVENTS"
COMMANDS_STREAM = "NOETL_COMMANDS"
REQUESTS_STREAM = "NOETL_REQUESTS"

REQUEST_SUBJECT = "noetl.requests.execute"
CANCEL_SUBJECT = "noetl.requests.cancel"
# outside input for a running execution (SEMANTICS §17): recorded as engine inputs by the server
SIGNAL_SUBJECT = "noetl.requests.signal"
PAUSE_SUBJECT = "noetl.requests.pause"
RESUME_SUBJECT = "noetl.requests.resume"
REQUESTS_FILTER = "noetl.requests.>"
EVENTS_FILTER = "noetl.events.>"
COMMANDS_FILTER = "noetl.commands.>"
CANCEL_EVENTS_FILTER = "noetl.events.*.*.execution.cancel.requested"
# the server stopped a step run (a time limit): workers interrupt its commands still running
STEP_CANCELLED_FILTER = "noetl.events.*.*.step.cancelled"

# Timers and schedules (SEMANTICS §16, §18) live in one stream with JetStream's message schedules
# (nats-server >= 2.12): a definition on noetl.timers.at.<execution_id>.<timer_id> or
# noetl.timers.cron.<schedule> is published by NATS itself into the stream at its due time, on
# TIMER_DUE_SUBJECT (timers) or noetl.timers.fire.<schedule> (schedules, rolled up: one pending fire)
TIMERS_STREAM = "NOETL_TIMERS"
TIMERS_FILTER = "noetl.timers.>"
TIMER_DUE_SUBJECT = "noetl.timers.due"
SCHEDULE_FIRE_FILTER = "noetl.timers.fire.>"
TIMERS_CONSUMER = "noetl-server-timers"
SCHEDULES_CONSUMER = "noetl-server-schedules"
SCHEDULES_BUCKET = "noetl_schedules"

ITER_BUCKET = "noetl_iter"
ITER_STREAM = "KV_noetl_iter"
CATALOG_BUCKET = "noetl_catalog"
# playbook texts too large for one KV value, by digest: an object store of the same name
CATALOG_OBJECT_BUCKET = "noetl_catalog"
CREDENTIALS_BUCKET = "noetl_credentials"
SERVER_BUCKET = "noetl_server"
# partition leases and server membership (TTL'd keys): which replica decides for which partition
LEASES_BUCKET = "noetl_leases"
PARTITIONS_KEY = "config.partitions"
DEFAULT_PARTITIONS = 8
RESULTS_BUCKET = "noetl_results"

DEFAULT_POOL = "default"

# The events the server decides on, declared with the rest of the names in the vocabulary.
SERVER_INPUT_EVENTS = vocabulary.SERVER_INPUT_EVENTS
# what the server reads for its inputs: they may also come inside a batch (noetl.events.batches)
INPUT_SUBJECT_NAMES = (*SERVER_INPUT_EVENTS, vocabulary.EVENTS_BATCHED)


def partition_of(execution_id: str, partitions: int = 1) -> int:
    """A small stable integer, so server replicas can split executions without overlap."""
    if partitions <= 1:
        return 0
    return int(execution_id[:8], 16) % partitions


def checkpoint_key(partition: int) -> str:
    """The key in ``SERVER_BUCKET`` holding the stream sequence a partition has decided up to."""
    return f"checkpoint.p{partition}"


def kv_subject(bucket: str, key: str) -> str:
    """A KV put is a publish to this subject: for writes nobody needs to wait for."""
    return f"$KV.{bucket}.{key}"


def consumer_delete_subject(stream: str, consumer: str) -> str:
    """JetStream's API to delete a consumer, for deletes nobody needs to wait for."""
    return f"$JS.API.CONSUMER.DELETE.{stream}.{consumer}"


def consumer_next_subject(stream: str, consumer: str) -> str:
    """JetStream's API a pull consumer is fetched from."""
    return f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"


def partition_reader_name(partition: int, member: str = "", n: int = 0) -> str:
    """A server's reader of a partition's inputs; without member, the durable of old versions."""
    return f"noetl-server-p{partition}" + (f"-{member}-{n}" if member else "")


def event_subject(partition: int, execution_id: str, name: str) -> str:
    return f"noetl.events.{partition}.{execution_id}.{name}"


def events_named(name: str) -> str:
    """Every execution's events of one name (listings: requested, finished, waiting, ...)."""
    return f"noetl.events.*.*.{name}"


def execution_events_filter(execution_id: str) -> str:
    return f"noetl.events.*.{execution_id}.>"


def execution_event_filter(execution_id: str, name: str) -> str:
    return f"noetl.events.*.{execution_id}.{name}"


def partition_input_filters(partition: int) -> list[str]:
    return [f"noetl.events.{partition}.*.{n}" for n in INPUT_SUBJECT_NAMES]


def execution_input_filters(execution_id: str) -> list[str]:
    return [f"noetl.events.*.{execution_id}.{n}" for n in INPUT_SUBJECT_NAMES]


def timer_subject(execution_id: str, timer_id: str) -> str:
    """A timer's definition: one subject per timer, so purging it cancels that timer alone."""
    return f"noetl.timers.at.{execution_id}.{timer_id}"


def execution_timers_filter(execution_id: str) -> str:
    return f"noetl.timers.at.{execution_id}.*"


def schedule_subject(name: str) -> str:
    """A schedule's cron definition (``name`` checked by ``names.schedule_name_problem``)."""
    return f"noetl.timers.cron.{name}"


def schedule_fire_subject(name: str) -> str:
    return f"noetl.timers.fire.{name}"


def command_subject(pool: str) -> str:
    return f"noetl.commands.{pool}"


def worker_consumer(pool: str) -> str:
    return f"noetl-worker-{pool}"


def parse_event_subject(subject: str) -> tuple[int, str, str]:
    """``noetl.events.<p>.<execution_id>.<name>`` → (partition, execution_id, name)."""
    parts = subject.split(".", 4)
    if len(parts) != 5 or parts[0] != "noetl" or parts[1] != "events":
        raise ValueError(f"not an event subject: {subject!r}")
    return int(parts[2]), parts[3], parts[4]


def iter_key(execution_id: str, step_run_id: str, index: int) -> str:
    return f"{execution_id}.{step_run_id}.{index}"


def iter_snapshot_keys(execution_id: str, step_run_id: str) -> str:
    """The keys of one loop run's iteration snapshots (a pattern of ``KeyValue.purge``)."""
    return f"{execution_id}.{step_run_id}.*"


def catalog_digest_key(digest: str) -> str:
    return f"digest.{digest}"


_KEY_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/")


def key_token(text: str) -> str:
    """``text`` as one KV key token, injectively: letters, digits, ``-``, ``_`` and ``/`` stay,
    every other byte of its UTF-8 becomes ``=XX``. No two texts share a token (``team.a`` is
    ``team=2Ea``, never ``team_a``), and a token never holds the ``.`` that separates tokens."""
    return "".join(c if c in _KEY_SAFE else "".join(f"={b:02X}" for b in c.encode()) for c in text)


def catalog_path_key(path: str, version: str | None) -> str:
    """The KV key of a catalog path's version (``latest`` when None): injective in both, so a
    path or version can never overwrite another's entry. A version literally named ``latest``
    has its first letter escaped, so it cannot meet the ``latest`` pointer."""
    if not path:
        raise ValueError("a catalog path is not empty")
    if version is None or version == "":
        v = "latest"
    else:
        v = key_token(str(version))
        if v == "latest":
            v = "=6Catest"
    return f"path.{key_token(path)}.{v}"
