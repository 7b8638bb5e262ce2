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
