"""Upstream NoETL's dialect of `noetl.io/v2`, translated into this engine's canonical playbooks.

Upstream's playbooks look like this engine's (`tool`, `next.arcs`, `spec.policy.rules`) but
mean some things differently, and the differences are silent: a template that reads
`{{ api_url }}` renders here as an error, not as the workload's value. So the translation is
construct by construct, each with the same meaning (docs/migrate.md has the table):

- names: workload keys as bare names → `workload.<key>`; a step's result by the step's name →
  `ctx.<step>` (the step keeps its result there, by a `set_ctx` the migration adds, when a later
  step reads it); a bare loop iterator → `iter.<name>`; `output` in rules → `outcome`
  (`output.data` is `outcome.result`); result shapes (http `status_code`/`body`, postgres
  `command_N`) → this engine's;
- inputs: a task's `input` → `args` for the kinds that take them, and inlined into the
  templates of the kinds that do not; a step's `input` → each of its tasks' inputs;
- state: `set` on a step, a task, a rule's `then` or an arc → `set_ctx`/`set_iter` in task rules
  (an arc's `set` travels in the arc's `args` to a first task of its target);
- python: `libs`, the preloaded modules, `context`, `input_data`, `main` parameters filled from
  the context, a top-level `return`, `script:` → the code and `args` this engine runs;
- routing: a leaf step routes to `end` when there is one; a step reached from several branches
  of an inclusive fan-out is a barrier (it runs once, after all of them): an admission join;
- `auth: name` without a `keychain` entry → the entry is declared; `else` without `then`;
  `when` over an undefined path is false (`| default(false)`).

What has no translation is refused (a note with `untranslated`, which `noetl migrate` turns into
exit 2), never dropped silently.

The passes live in modules named for what they translate, each a class the next one extends:
upstream_facts (what the names depend on), upstream_python_task, upstream_tasks, upstream_steps,
upstream_routing; :class:`Upstream` here fixes their order and runs the closing checks.
"""

from __future__ import annotations

import re
from typing import Any

from noetl.dsl.migrate.core import Migrator
from noetl.dsl.migrate.upstream_facts import SQL
from noetl.dsl.migrate.upstream_names import strings, unreachable_commands
from noetl.dsl.migrate.upstream_routing import UpstreamRouting
from noetl.dsl.migrate.upstream_rules import add_writes, split_set, undefined_false
from noetl.dsl.migrate.upstream_steps import UpstreamSteps
from noetl.dsl.migrate.upstream_tasks import ARGS_KINDS, CREDENTIAL_KIND

__all__ = [
    "ARGS_KINDS",
    "CREDENTIAL_KIND",
    "SQL",
    "Upstream",
    "add_writes",
    "split_set",
    "translate_upstream",
    "undefined_false",
]


class Upstream(UpstreamSteps, UpstreamRouting):
    """One playbook's translation; :meth:`run` rewrites ``doc`` in place."""

    def run(self) -> None:
        """The order matters: structure first (so tasks and arcs are where they will be), then the
        facts the names depend on (which step results are read later), then every template is
        renamed once, from the upstream text, before the migration adds templates of its own."""
        self._pending_sets: dict[str, list[str]] = {}
        self._workbook()
        for step in self.steps:
            self._shape(step, self.paths[id(step)])
            self._loop_knobs(step, self.paths[id(step)])
        self._facts()
        for step in self.steps:
            self._inputs(step, self.paths[id(step)])
        self._find_captures()
        self._name_notes()
        for step in self.steps:
            path = self.paths[id(step)]
            for label, task, where in self._tasks(step, path):
                self._task(step, path, label, task, where)
            self._step_output(step, path)
            self._when_admit_loop(step)
            self._arcs(step, path)
        for step in self.steps:
            path = self.paths[id(step)]
            self._step_set(step, path)
            self._capture(step, path)
        self._apply_arc_sets()
        self._to_end()
        self._barriers()
        self._keychain()
        self._check_commands()
        self._check_env()

    def _check_env(self) -> None:
        for step in self.steps:
            text = " ".join(strings({k: v for k, v in step.items() if k not in ("step", "desc")}))
            for region in re.findall(r"\{\{.*?\}\}|\{%.*?%\}", text, re.S):
                for name in sorted(set(re.findall(r"(?<![\w.])env\.(\w+)", region))):
                    self.m.cannot(
                        self.paths[id(step)],
                        f"`env.{name}`: upstream's templates read the process environment, this engine's "
                        "cannot (they are sandboxed): put the value in the workload or the request payload",
                    )

    def _check_commands(self) -> None:
        for name, f in self.facts.items():
            if f.kind not in SQL:
                continue
            for step in self.steps:
                text = " ".join(strings({k: v for k, v in step.items() if k != "step"}))
                for prefix in (f"ctx.{name}", "event.result" if step.get("step") == name else None):
                    if prefix is None:
                        continue
                    for path in unreachable_commands(text, prefix, f.statements):
                        self.m.cannot(
                            self.paths[id(step)],
                            f"`{path.replace(prefix, name, 1)}` reads the rows of statement "
                            f"{path.rsplit('_', 1)[1]} of `{name}`; a SQL task's result here is its last "
                            "statement's: split the statements into tasks, each with its own label",
                        )


def translate_upstream(m: Migrator, doc: dict[str, Any]) -> None:
    """Rewrite ``doc`` (an upstream playbook) in place into canonical form; notes on ``m``."""
    if not isinstance(doc.get("workflow"), list):
        m.cannot(("workflow",), "no `workflow` list: nothing to migrate")
        return
    Upstream(m, doc).run()
