"""Placement never changes an outcome (SEMANTICS §21): every generated loop runs once with
``exec: distributed`` and once with ``exec: local`` on the in-memory bus, and both runs must end
with the same status, error kind, result and ctx.

The generator (hypothesis) draws the loop's mode and ``max_in_flight``, its failure mode, its
items, and a pipeline of ``noop`` tasks whose rules write ``set_ctx`` (through reducers or not),
``set_iter``, ``jump`` back a bounded number of times, ``break`` and ``fail``. What a parallel loop
may compare is what does not depend on timing: its ctx writes go through order-free reducers
(``sum``, ``min``, ``max``, ``count``), its tasks do not read ``ctx``, and after a ``fail_fast``
failure only the status and the error kind are compared (which in-flight iterations still ran
is a matter of timing under either placement)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noetl.client.run import run_and_wait
from noetl.events.memory import MemoryBus
from tests.support import running

SUM_INTO_CTX = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: sum_into_ctx}
workflow:
  - step: start
    loop:
      in: [3, 1, 2]
      iterator: n
      spec: {policy: {exec: EXEC}}
    tool:
      - name: add
        kind: noop
        result: "{{ (ctx.sum | default(0)) + iter.n }}"
        spec:
          policy:
            rules: [{else: {then: {set_ctx: {sum: "{{ outcome.result }}"}}}}]
"""


async def _run(playbook: str) -> dict[str, Any]:
    bus = MemoryBus()
    try:
        async with running(bus):
            out = await run_and_wait(bus, {"request_id": uuid.uuid4().hex, "playbook": playbook}, timeout=30)
    finally:
        await bus.close()
    return out


async def test_a_sequential_local_loop_sees_the_set_ctx_of_the_iterations_before_it() -> None:
    for place in ("distributed", "local"):
        out = await _run(SUM_INTO_CTX.replace("EXEC", place))
        assert out["status"] == "success", (place, out.get("error"))
        assert out["result"] == [3, 4, 6] and out["ctx"] == {"sum": 6}, (place, out["result"], out["ctx"])


# ---------------------------------------------------------------------------------------------
# the generator


@st.composite
def loops(draw: st.DrawFn) -> dict[str, Any]:
    """A loop step's parts (not yet YAML): see the module's docstring for what varies."""
    mode = draw(st.sampled_from(["sequential", "parallel"]))
    parallel = mode == "parallel"
    failure = draw(st.sampled_from(["fail_fast", "best_effort"]))
    items = draw(st.lists(st.integers(min_value=-3, max_value=9), min_size=1, max_size=6))
    order_free = ["sum", "min", "max", "count"]
    reducers: dict[str, str] = {}
    if parallel or draw(st.booleans()):
        ops = order_free if parallel else [*order_free, "append"]
        for key in draw(st.lists(st.sampled_from(["total", "low", "seen"]), max_size=2, unique=True)):
            reducers[key] = draw(st.sampled_from(ops))
    n_tasks = draw(st.integers(min_value=1, max_value=3))
    tasks: list[dict[str, Any]] = []
    for t in range(n_tasks):
        reads_ctx = " + (ctx.acc | default(0))" if not parallel and draw(st.booleans()) else ""
        result = "{{ iter.x * " + str(t + 1) + " + (iter.y | default(0))" + reads_ctx + " }}"
        rules: list[dict[str, Any]] = []
        for _ in range(draw(st.integers(min_value=0, max_value=2))):
            kind = draw(st.sampled_from(["set_ctx", "set_iter", "jump", "break", "fail"]))
            cut = draw(st.integers(min_value=-3, max_value=9))
            op = draw(st.sampled_from(["==", ">", "<", "always"]))
            when: Any = True if op == "always" else f"{{{{ iter.x {op} {cut} }}}}"
            then: dict[str, Any]
            if kind == "set_ctx":
                if reducers:
                    then = {"set_ctx": {draw(st.sampled_from(sorted(reducers))): "{{ outcome.result }}"}}
                elif parallel:
                    continue  # a parallel loop writes only keys with a reducer
                else:
                    then = {"set_ctx": {"acc": "{{ (ctx.acc | default(0)) + outcome.result }}"}}
            elif kind == "set_iter":
                then = {"set_iter": {"y": "{{ (iter.y | default(0)) + 1 }}"}}
            elif kind == "jump":  # back to the first task, at most twice per iteration
                when = f"{{{{ (iter.hops | default(0)) < 2 and iter.x % 2 == {cut % 2} }}}}"
                then = {"do": "jump", "to": "t0", "set_iter": {"hops": "{{ (iter.hops | default(0)) + 1 }}"}}
            else:
                then = {"do": kind}
            rules.append({"when": when, "then": then})
        if t == 0 and (bad := draw(st.one_of(st.none(), st.sampled_from(items or [0])))) is not None:
            rules.insert(0, {"when": f"{{{{ iter.x == {bad} }}}}", "then": {"do": "fail"}})  # a failing item
        task: dict[str, Any] = {"name": f"t{t}", "kind": "noop", "result": result}
        if rules:
            task["spec"] = {"policy": {"rules": rules}}
        tasks.append(task)
    return {
        "mode": mode,
        "max_in_flight": draw(st.integers(min_value=1, max_value=4)),
        "failure": failure,
        "items": items,
        "reducers": reducers,
        "tasks": tasks,
        "routed": draw(st.booleans()),  # arcs on the loop's outcome: the same routing either way
    }


def playbook(loop: dict[str, Any], place: str) -> str:
    policy = f"exec: {place}"
    if loop["reducers"]:
        policy += ", reducers: " + json.dumps(loop["reducers"])
    spec = f"mode: {loop['mode']}, policy: {{{policy}}}"
    if loop["mode"] == "parallel":
        spec += f", max_in_flight: {loop['max_in_flight']}"
    tasks = "".join(f"      - {json.dumps(t)}\n" for t in loop["tasks"])  # YAML reads JSON
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: placement}}
workflow:
  - step: start
    spec: {{policy: {{failure: {{mode: {loop["failure"]}}}}}}}
    loop:
      in: {json.dumps(loop["items"])}
      iterator: x
      spec: {{{spec}}}
    tool:
{tasks}{ROUTES if loop["routed"] else ""}"""


ROUTES = """    next:
      arcs:
        - {step: after_ok, when: "{{ event.status == 'success' }}", args: {result: "{{ event.result }}"}}
        - {step: after_err, when: "{{ event.status == 'error' }}", args: {kind: "{{ event.error.kind }}"}}
  - step: after_ok
    tool: {kind: noop, result: "{{ args.result }}"}
  - step: after_err
    tool: {kind: noop, result: "{{ args.kind }}"}
"""


def _outcome(out: dict[str, Any], loop: dict[str, Any]) -> dict[str, Any]:
    kind = (out.get("error") or {}).get("kind")
    steps = {name: [r.get("status") for r in runs] for name, runs in (out.get("steps") or {}).items()}
    seen: dict[str, Any] = {"status": out["status"], "error": kind, "steps": steps}
    failed = (out.get("steps") or {}).get("start", [{}])[0].get("status") == "failed"
    if loop["mode"] == "parallel" and loop["failure"] == "fail_fast" and failed:
        # which in-flight iterations still ran after the failure is timing, under either placement
        return {**seen, "result": out.get("result") if loop["routed"] else None}
    ends = ("loop.iteration.done", "loop.iteration.failed")
    iterations = sorted(
        (e["payload"]["index"], e["name"]) for e in out.get("events") or () if e["name"] in ends
    )
    return {**seen, "result": out.get("result"), "ctx": out.get("ctx"), "iterations": iterations}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loops())
def test_exec_local_and_exec_distributed_end_the_same(loop: dict[str, Any]) -> None:
    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        return await _run(playbook(loop, "distributed")), await _run(playbook(loop, "local"))

    distributed, local = asyncio.run(both())
    assert _outcome(local, loop) == _outcome(distributed, loop), playbook(loop, "local")
