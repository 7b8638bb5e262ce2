"""The NATS service ``noetl`` as a user reaches it: a plain nats-py client, no noetl code on its side."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import nats
import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from noetl.events.batches import events_in
from noetl.events.nats_port import NatsBus
from noetl.server.api import NatsApiService
from noetl.server.service import Server
from noetl.worker.service import Worker

HELLO = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hello, path: tests/nats-api/hello}
workload: {name: world}
workflow:
  - step: start
    tool:
      - name: greet
        kind: python
        args: {name: "{{ workload.name }}"}
        code: |
          def main(name):
              return "hello " + name
"""


@pytest.fixture
async def service(nc, nats_server) -> AsyncIterator[dict[str, Any]]:
    server, worker = Server(NatsBus(nc)), Worker(NatsBus(nc), concurrency=4)
    await server.start()
    await worker.start()
    micro = NatsApiService(nc, server.requests)
    await micro.start()
    user = await nats.connect(nats_server.url)  # what a user's script has: a bare client
    try:
        yield {"user": user, "micro": micro, "server": server}
    finally:
        await user.close()
        await micro.stop()
        await worker.stop(drain=False)
        await server.stop()


async def request(nc: Any, subject: str, body: Any) -> tuple[dict[str, Any], dict[str, str]]:
    msg = await nc.request(subject, json.dumps(body).encode(), timeout=10)
    return json.loads(msg.data), dict(msg.headers or {})


async def follow_to_finish(user: Any, execution_id: str) -> list[dict[str, Any]]:
    """`nats stream view NOETL_EVENTS --subject 'noetl.events.*.<id>.>'`, followed as it grows."""
    js = user.jetstream()
    sub = await js.subscribe(
        f"noetl.events.*.{execution_id}.>",
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    events = []
    try:
        while True:
            msg = await sub.next_msg(timeout=30)
            events.extend(events_in(msg.data))  # a worker's run: one batch of its events
            if events[-1]["name"] == "workflow.finished":
                return events
    finally:
        await sub.unsubscribe()


async def test_execute_by_request_then_follow_events(service) -> None:
    user = service["user"]
    reply, headers = await request(user, "noetl.api.execute", {"playbook": HELLO, "payload": {"name": "Ada"}})
    assert "Nats-Service-Error-Code" not in headers and set(reply) == {"execution_id"}
    events = await follow_to_finish(user, reply["execution_id"])
    assert events[0]["name"] == "playbook.execution.requested"
    assert events[-1]["payload"]["status"] == "success" and events[-1]["payload"]["result"] == "hello Ada"

    status, _ = await request(user, "noetl.api.status", {"execution_id": reply["execution_id"]})
    assert status["status"] == "success" and status["result"] == "hello Ada"
    assert status["steps"]["start"][0]["status"] == "done" and "events" in status


async def test_core_subscription_on_every_finish(service) -> None:
    """`nats sub 'noetl.events.*.*.workflow.finished'` opened first, then the request: no race."""
    user = service["user"]
    finished = await user.subscribe("noetl.events.*.*.workflow.finished")
    try:
        rid = uuid.uuid4().hex
        first, _ = await request(user, "noetl.api.execute", {"playbook": HELLO, "request_id": rid})
        # the same request_id again is the same execution, not a second one
        again, _ = await request(user, "noetl.api.execute", {"playbook": HELLO, "request_id": rid})
        assert again == first
        while True:
            msg = await finished.next_msg(timeout=30)
            if msg.subject.split(".")[3] == first["execution_id"]:
                break
    finally:
        await finished.unsubscribe()
    assert json.loads(msg.data)["payload"]["result"] == "hello world"
    events = await follow_to_finish(user, first["execution_id"])
    assert [e["name"] for e in events].count("workflow.started") == 1


async def test_errors_come_back_with_service_error_headers(service) -> None:
    user = service["user"]
    bad = HELLO.replace("kind: python", "kind: teleport")
    reply, headers = await request(user, "noetl.api.execute", {"playbook": bad})
    assert headers["Nats-Service-Error-Code"] == "422" and reply["error"]["kind"] == "playbook_invalid"
    assert "teleport" in json.dumps(reply["error"]["problems"])
    reply, headers = await request(user, "noetl.api.execute", {"nope": 1})
    assert headers["Nats-Service-Error-Code"] == "400" and reply["error"]["kind"] == "request_invalid"
    reply, headers = await request(user, "noetl.api.status", {"execution_id": uuid.uuid4().hex})
    assert headers["Nats-Service-Error-Code"] == "404" and reply["error"]["kind"] == "not_found"
    reply, headers = await request(user, "noetl.api.status", {"execution_id": "noetl.>"})
    assert headers["Nats-Service-Error-Code"] == "400"
    reply, headers = await request(user, "noetl.api.cancel", ["not", "an", "object"])
    assert headers["Nats-Service-Error-Code"] == "400"


async def test_cancel_endpoint_records_the_cancel_request(service) -> None:
    user = service["user"]
    unknown = uuid.uuid4().hex  # no such execution: 404, and nothing is recorded (no phantom)
    reply, headers = await request(user, "noetl.api.cancel", {"execution_id": unknown})
    assert headers["Nats-Service-Error-Code"] == "404" and reply["error"]["kind"] == "not_found"
    reply, headers = await request(user, "noetl.api.status", {"execution_id": unknown})
    assert headers["Nats-Service-Error-Code"] == "404", reply  # before: "running", forever
    started, _ = await request(user, "noetl.api.execute", {"playbook": HELLO, "payload": {"name": "Ada"}})
    eid = started["execution_id"]
    reply, headers = await request(user, "noetl.api.cancel", {"execution_id": eid, "reason": "because"})
    assert reply == {"execution_id": eid, "cancel": "requested"} and not headers
    sub = await user.jetstream().subscribe(
        f"noetl.events.*.{eid}.execution.cancel.requested", ordered_consumer=True
    )
    try:
        ev = json.loads((await sub.next_msg(timeout=30)).data)
    finally:
        await sub.unsubscribe()
    assert ev["payload"]["reason"] == "because"


async def test_service_discovery_ping_info_stats(service) -> None:
    """What `nats micro ls` / `nats micro info noetl` send."""
    user = service["user"]
    ping, _ = await request(user, "$SRV.PING.noetl", None)
    assert ping["name"] == "noetl" and ping["type"] == "io.nats.micro.v1.ping_response"
    info, _ = await request(user, "$SRV.INFO.noetl", None)
    assert {(e["name"], e["subject"], e["queue_group"]) for e in info["endpoints"]} == {
        ("execute", "noetl.api.execute", "noetl"),
        ("status", "noetl.api.status", "noetl"),
        ("cancel", "noetl.api.cancel", "noetl"),
        ("signal", "noetl.api.signal", "noetl"),
        ("pause", "noetl.api.pause", "noetl"),
        ("resume", "noetl.api.resume", "noetl"),
        ("rerun", "noetl.api.rerun", "noetl"),
        ("schedule_add", "noetl.api.schedule.add", "noetl"),
        ("schedule_list", "noetl.api.schedule.list", "noetl"),
        ("schedule_pause", "noetl.api.schedule.pause", "noetl"),
        ("schedule_resume", "noetl.api.schedule.resume", "noetl"),
        ("schedule_delete", "noetl.api.schedule.delete", "noetl"),
        ("catalog_register", "noetl.api.catalog.register", "noetl"),
        ("catalog_list", "noetl.api.catalog.list", "noetl"),
        ("catalog_show", "noetl.api.catalog.show", "noetl"),
        ("events", "noetl.api.events", "noetl"),
        ("logs", "noetl.api.logs", "noetl"),
        ("executions", "noetl.api.executions", "noetl"),
        ("credentials_list", "noetl.api.credentials.list", "noetl"),
        ("credentials_set", "noetl.api.credentials.set", "noetl"),
        ("credentials_delete", "noetl.api.credentials.delete", "noetl"),
    }
    inbox = user.new_inbox()
    sub = await user.subscribe(inbox)
    await user.publish("$SRV.PING", b"", reply=inbox)  # every service on the cluster answers
    answers = [json.loads((await sub.next_msg(timeout=5)).data)]
    await sub.unsubscribe()
    assert answers[0]["name"] == "noetl"


async def test_replicas_share_the_queue_group(service, nc) -> None:
    user, first = service["user"], service["micro"]
    second = NatsApiService(nc, service["server"].requests)
    await second.start()
    try:
        for _ in range(10):
            reply, _ = await request(user, "noetl.api.status", {"execution_id": uuid.uuid4().hex})
            assert reply["error"]["kind"] == "not_found"
        served = 0
        for svc in (first.service, second.service):
            for e in svc.stats().endpoints:
                served += e.num_requests if e.name == "status" else 0
    finally:
        await second.stop()
    assert served == 10  # each request answered once, by one replica


TICK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: tick, path: tests/nats-api/tick}
workflow:
  - step: start
    tool: {kind: noop, result: tick}
"""


async def test_schedules_through_the_service(service, nc) -> None:
    """`nats req noetl.api.schedule.add ...`: the same validation and refusals as /api/schedules, and a
    schedule added here fires executions that carry its name."""
    from noetl.client.run import finished_event
    from noetl.events import subjects as s
    from noetl.events.bus import read_messages
    from noetl.store.catalog import Catalog

    user = service["user"]
    await (await Catalog.open(NatsBus(nc))).register(TICK)
    add = "noetl.api.schedule.add"
    for body, code, words in (
        ({"name": "bad.name", "path": "tests/nats-api/tick", "cron": "* * * * *"}, "400", "schedule name"),
        ({"name": "tick", "path": "tests/nats-api/tick", "cron": "0 61 * * *"}, "400", "cron"),
        (
            {"name": "tick", "path": "tests/nats-api/tick", "cron": "* * * * *", "timezone": "Mars/Base"},
            "400",
            "time zone",
        ),
        (
            {"name": "tick", "path": "tests/nats-api/tick", "cron": "* * * * *", "overlap": "queue"},
            "400",
            "--overlap",
        ),
        ({"name": "tick", "cron": "* * * * *"}, "400", "--path"),
        ({"path": "tests/nats-api/tick", "cron": "* * * * *"}, "400", "name"),
    ):
        reply, headers = await request(user, add, body)
        assert headers.get("Nats-Service-Error-Code") == code, (body, reply)
        assert reply["error"]["kind"] == "request_invalid" and words in reply["error"]["message"], reply
    reply, headers = await request(user, add, ["not", "an", "object"])
    assert headers["Nats-Service-Error-Code"] == "400", reply

    reply, headers = await request(
        user,
        add,
        {"name": "tick", "path": "tests/nats-api/tick", "cron": "*/2 * * * * *", "payload": {"n": 1}},
    )
    assert "Nats-Service-Error-Code" not in headers, reply
    assert reply["name"] == "tick" and reply["paused"] is False and reply["overlap"] == "allow"

    async def fired() -> list[dict[str, Any]]:
        msgs = await read_messages(
            NatsBus(nc), s.EVENTS_STREAM, [s.execution_event_filter("*", "playbook.execution.requested")]
        )
        return [ev for _, ev in msgs if (ev.get("payload") or {}).get("schedule") == "tick"]

    started: list[dict[str, Any]] = []
    for _ in range(100):  # the first fire comes within 2 s
        started = await fired()
        if started:
            break
        await asyncio.sleep(0.1)
    assert started, "no execution of schedule tick within 10 s"
    assert started[0]["payload"]["request_id"].startswith("schedule.tick.")
    status, _ = await request(user, "noetl.api.status", {"execution_id": started[0]["execution_id"]})
    assert status["schedule"] == "tick", status

    reply, headers = await request(user, "noetl.api.schedule.pause", {"name": "tick"})
    assert "Nats-Service-Error-Code" not in headers and reply["paused"] is True, reply
    listed, _ = await request(user, "noetl.api.schedule.list", {})
    assert [(x["name"], x["paused"], x["next_fire"]) for x in listed["schedules"]] == [("tick", True, None)]
    reply, _ = await request(user, "noetl.api.schedule.resume", {"name": "tick"})
    assert reply["paused"] is False, reply
    listed, _ = await request(user, "noetl.api.schedule.list", None)  # `nats req ... ''` works too
    assert listed["schedules"][0]["next_fire"] is not None, listed

    reply, headers = await request(user, "noetl.api.schedule.delete", {"name": "tick"})
    assert "Nats-Service-Error-Code" not in headers and reply == {"name": "tick", "deleted": True}
    for action in ("pause", "resume", "delete"):
        reply, headers = await request(user, f"noetl.api.schedule.{action}", {"name": "tick"})
        assert headers["Nats-Service-Error-Code"] == "404" and reply["error"]["kind"] == "not_found", reply
        reply, headers = await request(user, f"noetl.api.schedule.{action}", {"name": "a.>"})
        assert headers["Nats-Service-Error-Code"] == "400", (action, reply)
    listed, _ = await request(user, "noetl.api.schedule.list", {})
    assert listed == {"schedules": []}
    for ev in started:
        for _ in range(100):
            if await finished_event(NatsBus(nc), ev["execution_id"]):
                break
            await asyncio.sleep(0.1)


async def test_read_endpoints_refuse_malformed_requests_and_page_events(service) -> None:
    """The read endpoints the CLI uses as a principal: a malformed request is a 400
    `request_invalid` naming what to send (never a 30 s time-out or a 500), an unknown execution
    or playbook a 404, and an execution's events come whole over pages asked with `after`."""
    user = service["user"]
    bad: list[tuple[str, Any]] = [
        ("noetl.api.events", {"execution_id": 7}),
        ("noetl.api.events", ["not", "an", "object"]),
        ("noetl.api.logs", {"execution_id": "x", "step": 3}),
        ("noetl.api.executions", {"status": 1}),
        ("noetl.api.catalog.show", {"path": None}),
        ("noetl.api.credentials.set", {"name": "../etc", "data": {}}),
    ]
    for subject, body in bad:
        reply, headers = await request(user, subject, body)
        assert headers.get("Nats-Service-Error-Code") == "400", (subject, body, reply)
        assert reply["error"]["kind"] == "request_invalid", (subject, reply)
    missing = uuid.uuid4().hex
    for subject, body in (("noetl.api.events", {"execution_id": missing}),
                          ("noetl.api.catalog.show", {"path": "nowhere/none"})):
        reply, headers = await request(user, subject, body)
        assert headers.get("Nats-Service-Error-Code") == "404", reply
        assert reply["error"]["kind"] == "not_found", reply
    started, _ = await request(user, "noetl.api.execute", {"playbook": HELLO, "payload": {"name": "Ada"}})
    stored = await follow_to_finish(user, started["execution_id"])
    got: list[dict[str, Any]] = []
    after = 0
    while True:
        asked = {"execution_id": started["execution_id"], "after": after}
        page, _ = await request(user, "noetl.api.events", asked)
        got += page["events"]
        after = page["last"]
        if not page["more"]:
            break
    ids = [e["event_id"] for e in got]
    assert ids[: len(stored)] == [e["event_id"] for e in stored], (len(ids), len(stored))
