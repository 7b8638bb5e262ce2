"""Playbooks the console is shown with: by the browser tests and by scripts/console_screenshots.py."""

from tests.playbooks import approval, loop60

HOLD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_hold, path: tests/console/hold}
workload: {gate: "", items: [1, 2, 3]}
workflow:
  - step: start
    next: {arcs: [{step: hold}]}
  - step: hold
    tool:
      - name: wait_for_gate
        kind: python
        args: {gate: "{{ workload.gate }}"}
        code: |
          import os, time
          def main(gate):
              for _ in range(1200):
                  if os.path.exists(gate):
                      return "opened"
                  time.sleep(0.05)
              raise TimeoutError("the gate never opened")
    next: {arcs: [{step: squares}]}
  - step: squares
    loop: {in: "{{ workload.items }}", iterator: item}
    tool:
      - name: square
        kind: python
        args: {x: "{{ iter.item }}"}
        code: |
          def main(x):
              return x * x
    next: {arcs: [{step: finish, when: "{{ event.name == 'loop.done' }}"}]}
  - step: finish
    tool: {kind: noop, result: "{{ args }}"}
"""

FAIL = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_fail, path: tests/console/fail}
workflow:
  - step: start
    next: {arcs: [{step: explode}]}
  - step: explode
    tool:
      - name: check_widget
        kind: python
        code: |
          def main():
              raise ValueError("widget 42 is missing")
"""

SLOW = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_slow, path: tests/console/slow}
workflow:
  - step: start
    tool:
      - name: wait
        kind: python
        code: |
          import time
          def main():
              for _ in range(1200):
                  time.sleep(0.05)
              return "too late"
"""

DOUBLE = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_double, path: tests/console/double, version: "1"}
workload: {n: 1}
workflow:
  - step: start
    next: {arcs: [{step: double, args: {x: "{{ workload.n }}"}}]}
  - step: double
    tool:
      - name: calc
        kind: python
        args: {x: "{{ args.x }}"}
        code: |
          def main(x):
              return {"doubled": x * 2}
"""

ORDERS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: orders_daily
  path: demo/orders_daily
  version: "3"
  description: fan out to two extracts, join them, enrich every order in parallel, report
workload:
  orders: [1001, 1002, 1003, 1004, 1005, 1006, 1007, 1008]
  delay: 0.2
workflow:
  - step: start
    next:
      spec: {mode: inclusive}
      arcs:
        - step: extract_users
        - step: extract_orders
  - step: extract_users
    tool:
      - name: users
        kind: python
        args: {delay: "{{ workload.delay }}"}
        code: |
          import time
          def main(delay):
              time.sleep(delay)
              return 3
        spec:
          policy:
            rules:
              - else: {then: {do: continue, set_ctx: {users: "{{ outcome.result }}"}}}
    next: {arcs: [{step: join}]}
  - step: extract_orders
    tool:
      - name: orders
        kind: python
        args: {orders: "{{ workload.orders }}", delay: "{{ workload.delay }}"}
        code: |
          import time
          def main(orders, delay):
              time.sleep(delay * 2)
              return orders
        spec:
          policy:
            rules:
              - else: {then: {do: continue, set_ctx: {orders: "{{ outcome.result }}"}}}
    next: {arcs: [{step: join}]}
  - step: join
    spec:
      policy:
        admit:
          rules:
            - when: "{{ ctx.users is defined and ctx.orders is defined }}"
              then: {allow: true}
            - else: {then: {allow: false}}
    next: {arcs: [{step: enrich}]}
  - step: enrich
    spec:
      policy:
        failure: {mode: best_effort}
    loop:
      in: "{{ ctx.orders }}"
      iterator: order
      spec: {mode: parallel, max_in_flight: 3}
    tool:
      - name: lookup
        kind: python
        args: {order: "{{ iter.order }}", delay: "{{ workload.delay }}"}
        code: |
          import time
          def main(order, delay):
              time.sleep(delay)
              if order == 1006:
                  raise ValueError(f"order {order}: customer record not found")
              return {"order": order, "total": order % 97}
        spec:
          policy:
            rules:
              - when: "{{ outcome.status == 'error' }}"
                then: {do: fail}
    next:
      arcs:
        - step: report
          when: "{{ event.name == 'loop.done' }}"
          args: {done: "{{ event.payload.done }}", failed: "{{ event.payload.failed }}"}
  - step: report
    tool:
      kind: noop
      result: "{{ args }}"
"""

APPROVAL = approval("tests/console/approval", timeout_s=3600, name="console_approval")

# --- issue 31: rerun, loops past 50 iterations, children -----------------------------------

RERUN = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_rerun, path: tests/console/rerun}
workload: {divisor: 0}
workflow:
  - step: start
    next: {arcs: [{step: fetch}]}
  - step: fetch
    tool:
      - name: count
        kind: python
        code: |
          def main():
              return 10
        spec:
          policy:
            rules:
              - else:
                  then: {do: continue, set_ctx: {fetched: "{{ outcome.result }}"}}
    next: {arcs: [{step: divide, args: {n: "{{ event.result }}"}}]}
  - step: divide
    tool:
      - name: div
        kind: python
        args: {n: "{{ args.n }}", d: "{{ workload.divisor }}"}
        code: |
          def main(n, d):
              return n // d
    next: {arcs: [{step: report, when: "{{ event.status == 'success' }}"}]}
  - step: report
    tool: {kind: noop, result: "{{ ctx.fetched }} split, each {{ args }}"}
"""

LOOP60 = loop60("tests/console/loop60", name="console_loop60")

CHILD = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_child, path: tests/console/child}
workflow:
  - step: start
    tool: {kind: noop, result: "{{ workload.city | default('none') }}"}
"""

PARENT = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: console_parent, path: tests/console/parent}
workflow:
  - step: start
    tool: {kind: playbook, path: tests/console/child, args: {city: Paris}}
"""
