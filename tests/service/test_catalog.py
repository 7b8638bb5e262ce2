"""The playbook catalog on a real nats-server: texts by path and digest, large ones as objects."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from nats.js.errors import KeyNotFoundError

from noetl.events import subjects as s
from noetl.events.streams import ensure_all
from noetl.store.catalog import MAX_MESSAGE_BYTES, Catalog


def playbook(path: str, filler_rows: int) -> str:
    """A valid playbook made large by a python task's comment block (never rendered)."""
    rows = "".join(f"              # row {i:06d} {'x' * 80}\n" for i in range(filler_rows))
    return (
        f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {{name: big, path: {path}}}\n"
        "workflow:\n  - step: start\n    tool:\n      - name: answer\n        kind: python\n"
        "        code: |\n          def main():\n" + rows + "              return 42\n"
    )


@pytest.mark.parametrize(("rows", "in_kv"), [(10, True), (14_000, False)], ids=["small", "over-1MiB"])
async def test_text_by_path_and_digest(nc: Any, rows: int, in_kv: bool) -> None:
    js = nc.jetstream()
    await ensure_all(js)
    path = f"tests/catalog-{uuid.uuid4().hex[:8]}"
    text = playbook(path, rows)
    assert (len(text.encode()) <= MAX_MESSAGE_BYTES) is in_kv
    entry = await (await Catalog.open(js)).register(text, "big.yaml")

    fresh = await Catalog.open(js)  # nothing cached: reads what the bucket holds
    assert await fresh.get(path) == text
    assert await fresh.get_by_digest(entry["digest"]) == text
    kv = await js.key_value(s.CATALOG_BUCKET)
    if in_kv:
        assert (await kv.get(s.catalog_digest_key(entry["digest"]))).value == text.encode()
    else:
        with pytest.raises(KeyNotFoundError):
            await kv.get(s.catalog_digest_key(entry["digest"]))
        info = await (await js.object_store(s.CATALOG_OBJECT_BUCKET)).get_info(entry["digest"])
        assert info.size == len(text.encode())


async def test_unknown_digest_is_none(nc: Any) -> None:
    js = nc.jetstream()
    await ensure_all(js)
    assert await (await Catalog.open(js)).get_by_digest("0" * 64) is None


async def test_request_event_gets_its_text_by_digest(nc: Any) -> None:
    js = nc.jetstream()
    await ensure_all(js)
    catalog = await Catalog.open(js)
    text = playbook(f"tests/catalog-{uuid.uuid4().hex[:8]}", 14_000)
    entry = await catalog.register(text, "big.yaml")
    digest = entry["digest"]
    by_digest = {"name": "playbook.execution.requested", "execution_id": "e1", "payload": {"digest": digest}}
    assert (await catalog.with_playbook_text(by_digest))["payload"] == {"digest": digest, "playbook": text}
    inline = {"name": "playbook.execution.requested", "payload": {"digest": "d", "playbook": "inline"}}
    other = {"name": "step.done", "payload": {}}
    assert await catalog.with_playbook_text(inline) is inline
    assert await catalog.with_playbook_text(other) is other
    lost = {"name": "playbook.execution.requested", "execution_id": "e2", "payload": {"digest": "0" * 64}}
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
