"""Playbooks several test suites run: one text each, so they cannot drift apart."""

from __future__ import annotations


def approval(path: str, *, timeout_s: int = 60, name: str = "approval") -> str:
    """Waits at ``approve`` for the signal ``approval``; its data's ``approved`` picks ``ship`` or
    ``reject``. ``path``: the catalog path, one per suite (they share a nats-server)."""
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: {name}
  path: {path}
  description: a person approves the shipment (or not)
workflow:
  - step: start
    next: {{arcs: [{{step: approve}}]}}
  - step: approve
    spec: {{policy: {{lifecycle: {{await: {{signal: approval, timeout_s: {timeout_s}}}}}}}}}
    next:
      arcs:
        - {{step: ship, when: "{{{{ event.name == 'step.done' and event.result.approved }}}}"}}
        - {{step: reject}}
  - step: ship
    tool: {{kind: noop, result: shipped}}
  - step: reject
    tool: {{kind: noop, result: rejected}}
"""


def loop60(path: str, *, name: str = "loop60") -> str:
    """A parallel best-effort loop of 60 items whose 57th fails: an iteration table past its first
    page, a failed iteration to find."""
    loop = '{in: "{{ range(workload.n) | list }}", iterator: i, spec: {mode: parallel, max_in_flight: 8}}'
    return f"""
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}, path: {path}}}
workload: {{n: 60, bad: 57}}
workflow:
  - step: start
    next: {{arcs: [{{step: each}}]}}
  - step: each
    spec: {{policy: {{failure: {{mode: best_effort}}}}}}
    loop: {loop}
    tool:
      - name: work
        kind: python
        args: {{i: "{{{{ iter.i }}}}", bad: "{{{{ workload.bad }}}}"}}
        code: |
          def main(i, bad):
              if i == bad:
                  raise ValueError(f"item {{i}} is bad")
              return i
"""
