"""The playbook catalog, on the bus port: texts by path and digest, large ones as objects.

Every test but the last runs on the in-memory twin and on a real nats-server (issue 16: the
behaviour is the port's, so the twin proves it in milliseconds and NATS proves the adapter)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest

from noetl.events import subjects as s
from noetl.events.envelope import Event
from noetl.events.memory import MemoryBus
from noetl.events.nats_port import NatsBus
from noetl.events.streams import ensure_all
from noetl.store.catalog import MAX_MESSAGE_BYTES, Catalog


@pytest.fixture(params=["memory", "nats"])
async def bus(request: Any, nats_server: Any) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryBus()
        return
    from noetl.events.bus import connect

    nc = await connect(nats_server.url, name="noetl-catalog-test")
    try:
        await ensure_all(nc.jetstream())
        yield NatsBus(nc)
    finally:
        await nc.close()


def playbook(path: str, filler_rows: int) -> str:
    """A valid playbook made large by a python task's comment block (never rendered)."""
    rows = "".join(f"              # row {i:06d} {'x' * 80}\n" for i in range(filler_rows))
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: big, path: {path}}}\n"
        "workflow:\n  - step: start\n    tool:\n      - name: answer\n        kind: python\n"
        "        code: |\n          def main():\n" + rows + "              return 42\n"
    )


@pytest.mark.parametrize(("rows", "in_kv"), [(10, True), (14_000, False)], ids=["small", "over-1MiB"])
async def test_text_by_path_and_digest(bus: Any, rows: int, in_kv: bool) -> None:
    path = f"tests/catalog-{uuid.uuid4().hex[:8]}"
    text = playbook(path, rows)
    assert (len(text.encode()) <= MAX_MESSAGE_BYTES) is in_kv
    entry = await (await Catalog.open(bus)).register(text, "big.yaml")

    fresh = await Catalog.open(bus)  # nothing cached: reads what the bucket holds
    assert await fresh.get(path) == text
    assert await fresh.get_by_digest(entry["digest"]) == text
    kv_entry = await (await bus.kv(s.CATALOG_BUCKET)).get(s.catalog_digest_key(entry["digest"]))
    stored = await (await bus.objects(s.CATALOG_OBJECT_BUCKET)).get(entry["digest"])
    if in_kv:
        assert kv_entry is not None and kv_entry.value == text.encode() and stored is None
    else:
        assert kv_entry is None and stored == text.encode()
    listed = [{k: e[k] for k in ("path", "version", "digest", "name")} for e in await fresh.list()]
    assert {"path": path, "version": None, "digest": entry["digest"], "name": "big"} in listed


async def test_unknown_digest_is_none(bus: Any) -> None:
    assert await (await Catalog.open(bus)).get_by_digest("0" * 64) is None


async def test_a_nats_jetstream_context_is_taken_as_its_bus(nc: Any) -> None:
    js = nc.jetstream()
    await ensure_all(js)
    assert await (await Catalog.open(NatsBus.of(js))).get_by_digest("0" * 64) is None


async def test_request_event_gets_its_text_by_digest(bus: Any) -> None:
    catalog = await Catalog.open(bus)
    text = playbook(f"tests/catalog-{uuid.uuid4().hex[:8]}", 14_000)
    entry = await catalog.register(text, "big.yaml")
    digest = entry["digest"]
    # partial events: the catalog reads name and payload
    by_digest = cast(
        Event, {"name": "playbook.execution.requested", "execution_id": "e1", "payload": {"digest": digest}}
    )
    assert (await catalog.with_playbook_text(by_digest))["payload"] == {"digest": digest, "playbook": text}
    inline = cast(
        Event, {"name": "playbook.execution.requested", "payload": {"digest": "d", "playbook": "inline"}}
    )
    other = cast(Event, {"name": "step.done", "payload": {}})
    assert await catalog.with_playbook_text(inline) is inline
    assert await catalog.with_playbook_text(other) is other
    lost = cast(
        Event, {"name": "playbook.execution.requested", "execution_id": "e2", "payload": {"digest": "0" * 64}}
    )
    with pytest.raises(LookupError, match="execution e2 is not in the catalog"):
        await catalog.with_playbook_text(lost)


async def test_replicas_a_single_node_cannot_keep_are_refused_with_what_to_do(fresh_nats: Any) -> None:
    from noetl.dsl.errors import DeploymentError
    from noetl.events.bus import connect

    nc = await connect(fresh_nats.url)
    try:
        with pytest.raises(DeploymentError, match="NOETL_REPLICAS") as info:
            await ensure_all(nc.jetstream(), replicas=3)
        assert "1 for a single nats-server" in info.value.message
        await ensure_all(nc.jetstream())  # unset: R1, fine
        with pytest.raises(DeploymentError, match="nats stream edit NOETL_EVENTS --replicas 3"):
            await ensure_all(nc.jetstream(), replicas=3)  # existing streams: the change is refused
    finally:
        await nc.close()
