"""Input that once wedged a partition or vanished: each now fails on its own with a clear kind,
and the execution right after it succeeds (issue: nothing wedges the control plane)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from noetl.client.run import run_and_wait
from noetl.engine.fold import replay
from noetl.events import subjects as s
from noetl.events.bus import read_execution_events
from noetl.events.ids import execution_id_for
from noetl.events.nats_port import NatsBus

OK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ok, path: tests/ok}
workflow:
  - step: start
    tool: {kind: noop, result: 7}
"""


def _with_pool(pool: str) -> str:
    return OK.replace(
        "    tool: {kind: noop, result: 7}",
        f"    spec: {{pool: {json.dumps(pool)}}}\n    tool: {{kind: noop}}",
    )


async def _next_one_succeeds(nc: Any) -> None:
    out = await run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": OK}, timeout=20)
    assert out["status"] == "success" and out["result"] == 7, out


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("execution_id", "aa.bb", "32 lowercase hex"),
        ("execution_id", "*", "32 lowercase hex"),
        ("execution_id", ">", "32 lowercase hex"),
        ("version", {"a": 1}, "`version` must be a string"),
        ("path", ["x"], "`path` must be a string"),
        ("payload", "deep", "nests deeper than 64"),
        # before: accepted (202), then refused where the server reads its inputs: never decided
        ("trace_id", 7, "`trace_id` must be a string"),
        ("trace_id", {"a": 1}, "`trace_id` must be a string"),
    ],
)
async def test_a_malformed_request_ends_at_once_with_request_invalid(
    nc: Any, services: Any, field: str, value: Any, says: str
) -> None:
    """Before: 202 and nothing ran, or redelivered 5 times and dropped with no event."""
    rid = uuid.uuid4().hex
    req = {"request_id": rid, "path": "tests/none", "playbook": OK, field: value}
    req.pop("path" if field != "path" else "playbook")
    data = json.dumps(req).encode()
    if value == "deep":  # 600 levels, written by hand: JSON libraries refuse to write it
        data = data.replace(b'"deep"', b'{"x":' * 600 + b"{}" + b"}" * 600)
    server, _ = services
    answer = await server.requests.handle(data)
    assert answer["error"]["kind"] == "request_invalid" and says in answer["error"]["message"], answer
    if field != "execution_id":
        # over the stream the sender learns the same from workflow.finished, keyed by its request id
        sub = await nc.subscribe(s.execution_event_filter(execution_id_for(rid), "workflow.finished"))
        await nc.jetstream().publish(s.REQUEST_SUBJECT, data, headers={"Nats-Msg-Id": rid})
        finished = json.loads((await sub.next_msg(timeout=20)).data)
        await sub.unsubscribe()
        assert says in finished["payload"]["error"]["message"], finished
    else:
        info = await nc.jetstream().stream_info(s.EVENTS_STREAM, subjects_filter="noetl.events.>")
        made = [k for k in (info.state.subjects or {}) if k.split(".")[3] in ("aa", "*", ">")]
        assert not made, made
    await _next_one_succeeds(nc)


async def test_a_cancel_for_a_wildcard_id_publishes_nothing(nc: Any, services: Any) -> None:
    server, _ = services
    for bad in ("*", ">", "a b", 7):
        answer = await server.requests.cancel(json.dumps({"execution_id": bad}).encode())
        assert answer["error"]["kind"] == "request_invalid", answer
    info = await nc.jetstream().stream_info(
        s.EVENTS_STREAM, subjects_filter="noetl.events.*.*.execution.cancel.requested"
    )
    bad_subjects = [k for k in (info.state.subjects or {}) if k.split(".")[3] in ("*", ">")]
    assert not bad_subjects, bad_subjects
    assert execution_id_for("x")  # ids the server derives are what the check accepts
    await _next_one_succeeds(nc)


BIG_ARGS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big, path: tests/big}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: next, args: {blob: "{{ 'x' * 200000 }}"}}]}
  - step: next
    tool: {kind: noop}
"""


async def test_a_decision_jetstream_can_never_store_ends_its_execution_not_the_partition(
    tmp_path: Any,
) -> None:
    """A command over the NATS server's max_payload (128 KiB here): before, the server retried
    publishing it forever and every later execution of the partition waited behind it."""
    from noetl.events.bus import connect
    from noetl.host.natsserver import NatsServer
    from noetl.server.service import Server
    from noetl.worker.service import Worker

    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 131072\n")
    ns = NatsServer(extra_args=["-c", str(conf)]).start()
    nc = await connect(ns.url)
    server = Server(NatsBus(nc), partitions=1, leases=False)
    worker = Worker(NatsBus(nc), concurrency=4)
    try:
        await server.start()
        await worker.start()
        out = await run_and_wait(
            NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": BIG_ARGS}, timeout=30
        )
        assert out["status"] == "failed" and out["error"]["kind"] == "decision_unstorable", out
        assert "max_payload" in out["error"]["message"]
        # it ended through the engine: the log has the input, and a rebuild from it knows the end
        names = [e["name"] for e in await read_execution_events(NatsBus(nc), out["execution_id"])]
        assert "execution.abort.requested" in names, names
        msgs = await server.bus.read(s.EVENTS_STREAM, s.execution_input_filters(out["execution_id"]))
        rebuilt, _ = replay([await server.catalog.with_playbook_text(json.loads(m.data)) for m in msgs])
        assert rebuilt is not None and rebuilt.finished and rebuilt.status == "failed", rebuilt
        await _next_one_succeeds(nc)  # the same (only) partition goes on
    finally:
        await worker.stop(drain=False)
        await server.stop()
        await nc.close()
        ns.stop()


BOMB = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: bomb, path: tests/bomb}
workflow:
  - step: start
    tool: {kind: noop}
    next:
      arcs:
        - step: done
          args: {n: "{% for i in range(20) %}{{ ('x'*1000000)|list|sort|length }}{% endfor %}"}
  - step: done
    tool: {kind: noop}
"""

CYCLE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: cycle, path: tests/cycle}
executor: {spec: {policy: {limits: {max_step_runs: 30}}}}
workflow:
  - step: start
    tool: {kind: noop}
    next: {arcs: [{step: start}]}
"""


# ~0.1 s of template work, within every budget (900 000 loop iterations of the 1 000 000 allowed)
_HEAVY = "{% for i in range(900) %}{% for j in range(1000) %}{% endfor %}{% endfor %}x"
HEAVY_CHAIN = "\n".join(
    [
        "apiVersion: noetl.io/v2",
        "kind: Playbook",
        "metadata: {name: heavy, path: tests/heavy}",
        "workflow:",
    ]
    + [
        f"  - step: {'start' if i == 0 else f's{i}'}\n"
        f'    tool: [{{name: t, kind: noop, result: "{_HEAVY}"}}]'
        + (f'\n    next: {{arcs: [{{step: s{i + 1}, args: {{x: "{_HEAVY}"}}}}]}}' if i < 7 else "")
        for i in range(8)
    ]
)


async def test_heavy_templates_do_not_hold_the_event_loop(nc: Any, services: Any) -> None:
    """Before: a template within every size limit held the server's decision loop (19 s) and a
    worker's other commands. Now an execution whose templates are slow has them worked off the
    event loop after the first slow one, on the server (a slow lane) and on the worker (a thread):
    16 renders of ~0.1 s each stall the loop about twice, not 16 times."""
    import asyncio

    server, _ = services
    stalls: list[float] = []
    stop = asyncio.Event()

    async def probe() -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            t = loop.time()
            await asyncio.sleep(0.005)
            late = loop.time() - t - 0.005
            if late > 0.06:
                stalls.append(round(late, 3))

    watcher = asyncio.create_task(probe())
    heavy = asyncio.create_task(
        run_and_wait(NatsBus(nc), {"request_id": uuid.uuid4().hex, "playbook": HEAVY_CHAIN}, timeout=60)
    )
    light = 0
    while not heavy.done():
        await _next_one_succeeds(nc)
        light += 1
    out = await heavy
    stop.set()
    await watcher
    assert out["status"] == "success" and out["result"] == "x", out.get("error")
    assert len(stalls) <= 4, (
        f"{len(stalls)} event-loop stalls over 60 ms ({stalls}) during 16 heavy renders; "
        f"{light} light executions finished meanwhile"
    )
    assert server.lanes.opened >= 1, "the heavy execution never got a lane of its own"
