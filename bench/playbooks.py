"""The playbooks the scenarios run, generated so their size is a parameter.

Every task is ``noop``: the benchmark measures the engine's own cost per step or iteration
(decide, publish, fetch, snapshot, ack), not the cost of any tool.
"""

from __future__ import annotations

from typing import Any

import yaml

HEADER = {"apiVersion": "noetl.io/v2", "kind": "Playbook"}


def _dump(doc: dict[str, object]) -> str:
    return yaml.safe_dump({**HEADER, **doc}, sort_keys=False, width=1000)


def chain(steps: int) -> str:
    """``steps`` sequential steps, one noop task each: ``start`` → ``s001`` → ... → ``sNNN``."""
    if steps < 1:
        raise ValueError("a chain needs at least one step")
    names = ["start"] + [f"s{i:03d}" for i in range(1, steps)]
    workflow = []
    for i, name in enumerate(names):
        step: dict[str, object] = {"step": name, "tool": [{"name": "t", "kind": "noop", "result": i}]}
        if i + 1 < len(names):
            step["next"] = {"arcs": [{"step": names[i + 1]}]}
        workflow.append(step)
    return _dump(
        {"metadata": {"name": f"chain-{steps}", "path": f"bench/chain_{steps}"}, "workflow": workflow}
    )


def loop(iterations: int, *, parallel: bool, max_in_flight: int = 64) -> str:
    """One loop step over ``range(iterations)`` whose iterations run two noop tasks.

    Two tasks, not one, because the worker writes an iteration snapshot after every task but the
    last: this way every iteration pays for one snapshot write, which is what the
    issue's throughput goal asks for.
    """
    spec: dict[str, object] = {"mode": "parallel", "max_in_flight": max_in_flight} if parallel else {}
    body: dict[str, object] = {
        "step": "work",
        "loop": {"in": "{{ range(workload.n) | list }}", "iterator": "item"},
        "tool": [{"name": "a", "kind": "noop", "result": "{{ iter.item }}"}, {"name": "b", "kind": "noop"}],
    }
    if spec:
        body["loop"]["spec"] = spec
    mode = "par" if parallel else "seq"
    return _dump(
        {
            "metadata": {"name": f"loop-{mode}", "path": f"bench/loop_{mode}"},
            "workload": {"n": iterations},
            "workflow": [{"step": "start", "next": {"arcs": [{"step": "work"}]}}, body],
        }
    )


def tiny_loop(iterations: int, *, exec_: str, max_in_flight: int = 64) -> str:
    """A loop of ``iterations`` one-noop iterations, ``exec: distributed`` or ``local``
    (SEMANTICS §21): what the placement costs when the work itself costs nothing."""
    return _dump(
        {
            "metadata": {"name": f"tiny-{exec_}", "path": f"bench/tiny_{exec_}"},
            "workload": {"n": iterations},
            "workflow": [_noop_loop("start", "{{ range(workload.n) | list }}", exec_, max_in_flight)],
        }
    )


def _noop_loop(step: str, items: str, exec_: str, max_in_flight: int) -> dict[str, Any]:
    """A parallel loop step over ``items`` whose iterations run one noop task each."""
    return {
        "step": step,
        "loop": {
            "in": items,
            "iterator": "item",
            "spec": {"mode": "parallel", "max_in_flight": max_in_flight, "policy": {"exec": exec_}},
        },
        "tool": [{"name": "a", "kind": "noop", "result": "{{ iter.item }}"}],
    }


def three_step() -> str:
    """``start`` → ``s001`` → ``s002``, one noop task each: the fan-out scenario's execution."""
    return chain(3)


def one_step() -> str:
    """The smallest execution that still reaches a worker: one step, one noop task."""
    return _dump(
        {
            "metadata": {"name": "one-step", "path": "bench/one_step"},
            "workflow": [{"step": "start", "tool": [{"name": "t", "kind": "noop", "result": "ok"}]}],
        }
    )


def referenced_loop(iterations: int, *, exec_: str, max_in_flight: int = 64) -> str:
    """A loop of ``iterations`` one-noop iterations over a list a first step returns: the list is
    over the payload limit, so it travels by reference and the server reads it for ``loop.in``
    (no template could build a million elements: ``noetl.dsl.template_limits``). The limits on
    loop size and event bytes are raised to fit, as a playbook that means it would."""
    make = {"name": "make", "kind": "python", "args": {"n": "{{ workload.n }}"}}
    make["code"] = "def main(n):\n    return list(range(n))\n"
    return _dump(
        {
            "metadata": {"name": f"million-{exec_}", "path": f"bench/million_{exec_}"},
            "executor": {
                "spec": {"policy": {"limits": {"max_loop_items": iterations, "max_event_bytes": 16 << 30}}}
            },
            "workload": {"n": iterations},
            "workflow": [
                {
                    "step": "start",
                    "tool": [make],
                    "next": {"arcs": [{"step": "each"}]},
                },
                _noop_loop("each", "{{ event.result }}", exec_, max_in_flight),
            ],
        }
    )
