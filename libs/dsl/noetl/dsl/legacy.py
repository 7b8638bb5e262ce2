"""What replaces each construct the v10 DSL rejects (SEMANTICS §2, the replacement table).

One table, used by every check, so a construct gets the same advice wherever it is found.
"""

from __future__ import annotations

ROOT_VARS = (
    "root `vars` is not part of the v10 DSL: put inputs in `workload` (merged with the request "
    "payload) and execution state in `ctx`, written with `set_ctx` in a task's `spec.policy.rules`"
)

STEP_WHEN = (
    "a step has no top-level `when`: gate the step with `spec.policy.admit` "
    "(`spec: {policy: {admit: {rules: [{when: ..., then: {allow: true}}]}}}`)"
)

CASE = (
    "`case` is not part of the v10 DSL: route between steps with `next.arcs` (each arc has its own "
    "`when`) and react to a task's outcome with task `spec.policy.rules`"
)

RETRY = (
    "`retry` is not part of the v10 DSL: retry a task with a rule in its task `spec.policy.rules` "
    "with `do: retry` (`{when: \"{{ outcome.status == 'error' }}\", then: {do: retry, attempts: 3}}`)"
)

SINK = (
    "`sink` is not part of the v10 DSL: a sink is a task that writes and returns a reference; add a task "
    "(postgres, duckdb, http, ...) to `tool` that stores the data and returns its reference"
)

VARS = (
    "`vars` is not part of the v10 DSL: write state with `set_ctx` (execution) or `set_iter` (loop "
    "iteration) in the `then` of a task's `spec.policy.rules`"
)

EVAL = (
    "`eval` is not part of the v10 DSL: handle the task's outcome with `spec.policy.rules`, each rule "
    "`{when: ..., then: {do: continue|retry|jump|break|fail}}`"
)

EXPR = "`expr` is not part of the v10 DSL: write the condition as `when` in a rule of `spec.policy.rules`"

NEXT_MODE = (
    "`spec.next_mode` is not part of the v10 DSL: set the routing mode in `next.spec.mode` "
    "(`next: {spec: {mode: inclusive}, arcs: [...]}`)"
)

NEXT_LIST = (
    "`next` given as a list is the old form: write `next: {arcs: [{step: ..., when: ..., args: ...}]}` "
    "(the arcs go in `next.arcs`, the mode in `next.spec.mode`)"
)

TASK_WHEN = (
    "a task has no `when`: decide what happens after a task with its `spec.policy.rules` "
    "(`do: jump` skips tasks), or gate the whole step with `spec.policy.admit`"
)

# keys rejected on a step, and on a task, with their replacement
STEP_KEYS: dict[str, str] = {
    "when": STEP_WHEN,
    "case": CASE,
    "retry": RETRY,
    "sink": SINK,
    "vars": VARS,
    "eval": EVAL,
    "expr": EXPR,
}
TASK_KEYS: dict[str, str] = {
    "when": TASK_WHEN,
    "case": CASE,
    "retry": RETRY,
    "sink": SINK,
    "vars": VARS,
    "eval": EVAL,
    "expr": EXPR,
}

# keys of the old ``eval`` directives that v10 `then` does not have
THEN_KEYS: dict[str, str] = {
    "set_vars": "`set_vars` is not part of the v10 DSL: use `set_ctx` (execution) or `set_iter` (iteration)",
    "set_shared": "`set_shared` is not part of the v10 DSL: use `set_ctx`; in a parallel loop, declare how "
    "the iterations' writes combine in `loop.spec.policy.reducers` (`reducers: {total: sum}`)",
    "set_prev": "`set_prev` is not supported: `_prev` is the result of the last continued task",
    "max_attempts": "`max_attempts` is spelled `attempts` (the maximum number of runs, the first included)",
    "next": "a task policy never starts steps: route between steps with the step's `next.arcs`",
    "sink": SINK,
}
