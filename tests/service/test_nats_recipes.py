"""Every `nats` CLI recipe of docs/nats-contract.md, performed through the API the CLI uses.

The `nats` CLI cannot be installed here, so each recipe is done the way the CLI does it: raw
requests to the JetStream API subjects (`$JS.API.STREAM.INFO.<stream>`,
`$JS.API.CONSUMER.INFO.<stream>.<consumer>`, `$JS.API.STREAM.MSG.GET.<stream>`), a core
subscription on the documented wildcard, and a publish of the documented request JSON. If a
name in the contract changes, these tests fail before a user's script does.
"""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from noetl.client.run import Awaited, run_and_wait, wait_finished
from noetl.events import subjects as s
from noetl.events.batches import BATCHED, unbatch
from noetl.events.ids import execution_id_for
from noetl.events.nats_port import NatsBus
from noetl.server.service import Server
from noetl.store.catalog import Catalog
from noetl.worker.service import Worker

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "hello.yaml"
NANOS = 1_000_000_000


@pytest.fixture
async def services(nc):
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=8)
    await server.start()
    await worker.start()
    # `noetl catalog register examples/hello.yaml`
    await (await Catalog.open(NatsBus(nc))).register(HELLO.read_text(), str(HELLO))
    try:
        yield server, worker
    finally:
        await worker.stop(drain=False)
        await server.stop()


async def api(nc: Any, subject: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One JetStream API request, as the CLI sends it; the reply is JSON."""
    msg = await nc.request(subject, json.dumps(body).encode() if body else b"", timeout=5)
    return json.loads(msg.data)


async def stream_view(nc: Any, stream: str, subject_filter: str) -> list[dict[str, Any]]:
    """`nats stream view STREAM --subject FILTER`: walk the stream by `next_by_subj`."""
    out: list[dict[str, Any]] = []
    seq = 1
    while True:
        reply = await api(
            nc, f"$JS.API.STREAM.MSG.GET.{stream}", {"seq": seq, "next_by_subj": subject_filter}
        )
        if "error" in reply:
            assert reply["error"]["code"] == 404, reply  # no message at or after seq: the end
            return out
        out.append(reply["message"])
        seq = reply["message"]["seq"] + 1


def headers_of(message: dict[str, Any]) -> dict[str, str]:
    raw = base64.b64decode(message.get("hdrs") or b"").decode()
    pairs = [line.split(":", 1) for line in raw.split("\r\n")[1:] if ":" in line]
    return {k.strip(): v.strip() for k, v in pairs}


async def test_stream_view_sub_stream_info_consumer_info_kv_get(nc, services) -> None:
    # `nats sub 'noetl.events.*.*.workflow.finished'`, subscribed before the execution starts
    finished = await nc.subscribe("noetl.events.*.*.workflow.finished")
    request = {"request_id": uuid.uuid4().hex, "path": "examples/hello", "payload": {"names": ["Ada"]}}
    out = await run_and_wait(NatsBus(nc), request, timeout=30)
    assert out["status"] == "success"
    eid = out["execution_id"]
    while True:
        msg = await finished.next_msg(timeout=30)
        envelope = json.loads(msg.data)
        if envelope["execution_id"] == eid:
            break
    await finished.unsubscribe()
    assert msg.subject == f"noetl.events.{s.partition_of(eid, s.DEFAULT_PARTITIONS)}.{eid}.workflow.finished"
    assert envelope["payload"]["status"] == "success" and envelope["status"] == "success"

    # `nats stream view NOETL_EVENTS --subject 'noetl.events.*.<id>.>'`
    messages = await stream_view(nc, "NOETL_EVENTS", f"noetl.events.*.{eid}.>")
    stored = [json.loads(base64.b64decode(m["data"])) for m in messages]
    # a worker's run is one `events.batched` message: its `payload.events` hold the run's events
    # without the fields they share with it (docs/nats-contract.md, "Batched events")
    assert [e["name"] for m in stored for e in unbatch(m)] == [e["name"] for e in out["events"]]
    assert any(m["name"] == BATCHED for m in stored)
    for m, e in zip(messages, stored, strict=True):
        assert m["subject"] == f"noetl.events.{s.partition_of(eid, s.DEFAULT_PARTITIONS)}.{eid}.{e['name']}"
        assert headers_of(m)["Nats-Msg-Id"] == e["event_id"]  # the duplicate-window key
        assert e["execution_id"] == eid and e["schema_version"] == 1

    # `nats stream info NOETL_EVENTS` (and the other two streams)
    info = await api(nc, "$JS.API.STREAM.INFO.NOETL_EVENTS")
    cfg = info["config"]
    assert cfg["subjects"] == ["noetl.events.>"] and cfg["retention"] == "limits"
    assert cfg["storage"] == "file" and cfg["duplicate_window"] == 30 * 60 * NANOS
    assert cfg["max_age"] == 30 * 24 * 3600 * NANOS  # the default retention, NOETL_EVENTS_MAX_AGE
    assert info["state"]["messages"] >= len(stored)
    for stream, subjects in (
        ("NOETL_COMMANDS", ["noetl.commands.>"]),
        ("NOETL_REQUESTS", ["noetl.requests.>"]),
    ):
        cfg = (await api(nc, f"$JS.API.STREAM.INFO.{stream}"))["config"]
        assert cfg["subjects"] == subjects and cfg["retention"] == "workqueue"
        assert cfg["duplicate_window"] == 30 * 60 * NANOS

    # `nats consumer info NOETL_COMMANDS noetl-worker-default`
    info = await api(nc, "$JS.API.CONSUMER.INFO.NOETL_COMMANDS.noetl-worker-default")
    cfg = info["config"]
    assert cfg["durable_name"] == "noetl-worker-default"
    assert cfg["filter_subject"] == "noetl.commands.default"
    assert cfg["ack_policy"] == "explicit" and cfg["ack_wait"] == 30 * NANOS and cfg["max_deliver"] == -1

    # `nats kv get noetl_catalog path.examples/hello.latest`, then the digest it names
    entry = await api(
        nc,
        "$JS.API.STREAM.MSG.GET.KV_noetl_catalog",
        {"last_by_subj": "$KV.noetl_catalog.path.examples/hello.latest"},
    )
    pointer = json.loads(base64.b64decode(entry["message"]["data"]))
    assert pointer["path"] == "examples/hello" and pointer["name"] == "hello"
    text = await api(
        nc,
        "$JS.API.STREAM.MSG.GET.KV_noetl_catalog",
        {"last_by_subj": f"$KV.noetl_catalog.digest.{pointer['digest']}"},
    )
    assert base64.b64decode(text["message"]["data"]).decode() == HELLO.read_text()

    # the buckets and the object store exist under their documented names
    for stream in (
        "KV_noetl_iter",
        "KV_noetl_catalog",
        "KV_noetl_server",
        "KV_noetl_credentials",
        "OBJ_noetl_results",
        "OBJ_noetl_catalog",
    ):
        assert (await api(nc, f"$JS.API.STREAM.INFO.{stream}"))["config"]["name"] == stream
    checkpoint = await api(
        nc,
        "$JS.API.STREAM.MSG.GET.KV_noetl_server",
        {"last_by_subj": f"$KV.noetl_server.checkpoint.p{s.partition_of(eid, s.DEFAULT_PARTITIONS)}"},
    )
    assert int(base64.b64decode(checkpoint["message"]["data"])) > 0


async def test_nats_pub_request_runs_once_per_request_id(nc, services) -> None:
    js = nc.jetstream()
    request_id = f"r-{uuid.uuid4().hex}"
    body = json.dumps({"request_id": request_id, "path": "examples/hello", "payload": {"names": ["Ada"]}})
    # the sender knows the execution id before anything runs
    eid = execution_id_for(request_id)
    processed = await Awaited.open(NatsBus(nc), eid)  # before the publish: a fast end is not missed
    live = await nc.subscribe(f"noetl.events.*.{eid}.>")  # `nats sub 'noetl.events.*.<id>.>'`

    # `nats pub noetl.requests.execute '{...}' -H Nats-Msg-Id:<request_id>`
    ack = await js.publish("noetl.requests.execute", body.encode(), headers={"Nats-Msg-Id": request_id})
    assert ack.stream == "NOETL_REQUESTS" and not ack.duplicate
    await wait_finished(NatsBus(nc), eid, timeout=30, already_subscribed=processed)
    seen = [json.loads((await live.next_msg(timeout=30)).data)["name"]]
    while seen[-1] != "playbook.processed":
        seen.append(json.loads((await live.next_msg(timeout=30)).data)["name"])
    await live.unsubscribe()
    again = await js.publish("noetl.requests.execute", body.encode(), headers={"Nats-Msg-Id": request_id})
    assert again.duplicate  # within the duplicate window the same request is dropped by JetStream

    # a plain core publish without the header (what `nats pub` does by default) is stored too
    second_id = f"r-{uuid.uuid4().hex}"
    second = execution_id_for(second_id)
    processed = await Awaited.open(NatsBus(nc), second)
    await nc.publish(
        "noetl.requests.execute", json.dumps({"request_id": second_id, "path": "examples/hello"}).encode()
    )
    await wait_finished(NatsBus(nc), second, timeout=30, already_subscribed=processed)

    for execution_id in (eid, second):
        names = [
            json.loads(base64.b64decode(m["data"]))["name"]
            for m in await stream_view(nc, "NOETL_EVENTS", f"noetl.events.*.{execution_id}.>")
        ]
        assert names.count("workflow.started") == 1 and names[-1] == "playbook.processed"
        if execution_id == eid:
            assert sorted(seen) == sorted(names)  # live, every event arrived (order may interleave)


async def test_object_get_returns_a_referenced_result(nc, services) -> None:
    playbook = (ROOT / "docs" / "examples" / "result_reference.yaml").read_text()
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": playbook}, timeout=30)
    ref = out["steps"]["start"][0]["result"]
    assert out["status"] == "success" and ref["store"] == "nats.object"

    # `nats object get noetl_results <key>`: the object's meta message, then its chunks
    name = base64.urlsafe_b64encode(ref["key"].encode()).decode()
    meta = await api(
        nc, "$JS.API.STREAM.MSG.GET.OBJ_noetl_results", {"last_by_subj": f"$O.noetl_results.M.{name}"}
    )
    info = json.loads(base64.b64decode(meta["message"]["data"]))
    chunks = await stream_view(nc, "OBJ_noetl_results", f"$O.noetl_results.C.{info['nuid']}")
    data = b"".join(base64.b64decode(c["data"]) for c in chunks)
    assert len(data) == ref["size"] == info["size"]
    assert ref["checksum"] == "sha256:" + hashlib.sha256(data).hexdigest()
    assert json.loads(data)[:2] == ["row 0", "row 1"]


async def test_object_get_returns_a_large_playbook_text(nc, services) -> None:
    from noetl.store.catalog import Catalog
    from tests.service.test_catalog import playbook

    text = playbook(f"tests/recipe-{uuid.uuid4().hex[:8]}", 14_000)
    digest = (await (await Catalog.open(NatsBus(nc))).register(text, "big.yaml"))["digest"]

    # `nats object get noetl_catalog <sha256>`: the object's meta message, then its chunks
    name = base64.urlsafe_b64encode(digest.encode()).decode()
    meta = await api(
        nc, "$JS.API.STREAM.MSG.GET.OBJ_noetl_catalog", {"last_by_subj": f"$O.noetl_catalog.M.{name}"}
    )
    info = json.loads(base64.b64decode(meta["message"]["data"]))
    chunks = await stream_view(nc, "OBJ_noetl_catalog", f"$O.noetl_catalog.C.{info['nuid']}")
    assert b"".join(base64.b64decode(c["data"]) for c in chunks).decode() == text
