"""Upstream's steps: `workbook`, loop knobs, a step's `output` and `set`, kept results, arcs and
admission (part of upstream.py's translation).
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.migrate.core import Pipeline
from noetl.dsl.migrate.jinja import inner, rewrite
from noetl.dsl.migrate.upstream_names import rename, shape_renames
from noetl.dsl.migrate.upstream_rules import add_writes, split_set, undefined_false
from noetl.dsl.migrate.upstream_tasks import UpstreamTasks
from noetl.dsl.yamlload import Path


class UpstreamSteps(UpstreamTasks):
    """The per-step rewrite, after (and using) the per-task one."""

    _pending_sets: dict[str, list[str]]  # arc `set` keys per target step; reset by each run

    def _step_output(self, step: dict[str, Any], path: Path) -> None:
        if "output" not in step:
            return
        value = step.pop("output")
        tasks = self._tasks(step, path)
        if isinstance(value, dict) and tasks:
            last = tasks[-1][1]
            last["output"] = value
            self._output(last, (*path, "output"))
        else:
            self.m.cannot(
                (*path, "output"),
                "step `output` has no translation here: shape the step's result in its last task",
            )

    def _step_set(self, step: dict[str, Any], path: Path) -> None:
        for key, scope in (("set_ctx", "ctx"), ("set_iter", "iter")):  # upstream's older spelling
            if isinstance(step.get(key), dict):
                values = step.pop(key)
                merged = _d if isinstance(_d := step.get("set"), dict) else {}
                step["set"] = {**merged, **{f"{scope}.{k}": v for k, v in values.items()}}
        if "set" not in step:
            return
        m = self.m
        tasks = self._tasks(step, path)
        loop = isinstance(step.get("loop"), dict)
        spec = (step.get("loop") or {}).get("spec") if loop else None
        parallel = isinstance(spec, dict) and spec.get("mode") == "parallel"
        own = str(step.get("step"))
        f = self.facts[own]
        renames = self.base_renames(step)
        renames.update(self._outcome_renames({}, f.kind))
        renames.update(shape_renames(own, "outcome.result", f.kind, f.statements))
        values = rename(step.pop("set"), renames)
        if loop:
            m.did((*path, "set"), "a loop step's `set` runs after each iteration here (in its last task)")
        writes = split_set(m, values, (*path, "set"), loop=loop, parallel=parallel, where="on a step")
        if writes is None:
            return
        if not tasks:
            step["tool"] = [{"name": "set", "kind": "noop"}]
            tasks = self._tasks(step, path)
        add_writes(tasks[-1][1], writes)
        m.did(
            (*path, "set"),
            f"step `set` became set_ctx/set_iter in the rules of its last task "
            f"`{tasks[-1][0]}` (the step's result is `outcome.result` there)",
        )

    def _capture(self, step: dict[str, Any], path: Path) -> None:
        own = str(step.get("step"))
        if own not in self.captured:
            return
        tasks = self._tasks(step, path)
        value = "{{ outcome.result | default(none) }}"
        if isinstance(step.get("loop"), dict):
            loop = step["loop"]
            spec = loop.setdefault("spec", {})
            policy = spec.setdefault("policy", {})
            policy.setdefault("reducers", {})[own] = "append"
            how = "each iteration's result is appended (in completion order for a parallel loop)"
        else:
            how = "its result"
        add_writes(tasks[-1][1], {"set_ctx": {own: value}})
        self.m.did(path, f"later steps read `{own}` by name: {how} is kept as `ctx.{own}`")

    def _arcs(self, step: dict[str, Any], path: Path) -> None:
        nxt = step.get("next")
        arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
        if not isinstance(arcs, list):
            return
        own = str(step.get("step"))
        f = self.facts[own]
        renames = self.base_renames(step, iterator=False)
        renames.update(shape_renames(own, "event.result", f.kind, f.statements))
        renames.update(shape_renames("output.data", "event.result", f.kind, f.statements))
        renames.update(
            {
                "output.result": "event.result",
                "output.error": "event.error",
                "output.status": "('error' if event.name == 'step.failed' else 'ok')",
                "output": "event",
            }
        )
        done = "loop.done" if f.loop else "step.done"
        events = {"call.done": done, "step.exit": done, "call.error": "step.failed"}
        for k, arc in enumerate(arcs):
            if not isinstance(arc, dict):
                continue
            at = (*path, "next", "arcs", k)
            for key in ("when", "args"):
                if key in arc:
                    arc[key] = rename(arc[key], dict(renames))
            if isinstance(arc.get("when"), str):
                when = rewrite(
                    arc["when"], {}, lambda e: f"event.name == '{events[e]}'" if e in events else None
                )
                if when != arc["when"]:
                    self.m.did(
                        (*at, "when"),
                        "upstream's events in an arc (`call.done`, `call.error`, "
                        f"`step.exit`) are this engine's `{done}` / `step.failed`",
                    )
                arc["when"] = undefined_false(when)
            if "set" in arc:
                self._arc_set(arc, at, rename(arc.pop("set"), dict(renames)))

    def _arc_set(self, arc: dict[str, Any], at: Path, values: Any) -> None:
        m = self.m
        target = next((s for s in self.steps if s.get("step") == arc.get("step")), None)
        if target is None:
            m.cannot(
                at,
                f"arc `set` toward `{arc.get('step')}`, which is not a step: set it in the "
                "source step's `set` instead",
            )
            return
        writes = split_set(m, values, (*at, "set"), loop=False, parallel=False, where="on an arc")
        if writes is None:
            return
        if isinstance(target.get("loop"), dict):
            m.cannot(
                (*at, "set"),
                f"arc `set` into the loop step `{target['step']}`: its first task runs "
                "once per iteration here; move the `set` to the source step's `set`",
            )
            return
        args = _d if isinstance(_d := arc.get("args"), dict) else {}
        args["_set"] = writes["set_ctx"]
        arc["args"] = args
        keys = self._pending_sets.setdefault(str(target["step"]), [])
        keys.extend(k for k in writes["set_ctx"] if k not in keys)
        m.did(
            (*at, "set"),
            f"arc `set` travels in the arc's `args._set`; the first task of "
            f"`{target['step']}` writes it to ctx",
        )

    def _apply_arc_sets(self) -> None:
        for step in self.steps:
            keys = self._pending_sets.get(str(step.get("step")))
            if not keys:
                continue
            pipe = Pipeline(self.m, step)
            incoming = [
                a
                for s in self.steps
                for a in ((s.get("next") or {}).get("arcs") or [] if isinstance(s.get("next"), dict) else [])
                if isinstance(a, dict) and a.get("step") == step.get("step")
            ]
            values = {}
            for k in keys:
                every = all(k in ((a.get("args") or {}).get("_set") or {}) for a in incoming)
                values[k] = (
                    f"{{{{ args._set.{k} }}}}"
                    if every and k.isidentifier()
                    else f"{{{{ args._set[{k!r}] if args._set is defined and {k!r} in args._set "
                    f"else ctx[{k!r}] | default(none) }}}}"
                )
            task = {
                "name": pipe.unique("arc_set"),
                "kind": "noop",
                "spec": {"policy": {"rules": [{"else": {"then": {"do": "continue", "set_ctx": values}}}]}},
            }
            if not step.get("tool"):
                step["tool"] = [task]
            else:
                pipe.insert(0, task, None)

    def _when_admit_loop(self, step: dict[str, Any]) -> None:
        base = self.base_renames(step, iterator=False)
        loop = step.get("loop")
        if isinstance(loop, dict) and "in" in loop:
            loop["in"] = rename(loop["in"], dict(base))
        spec = step.get("spec")
        policy = spec.get("policy") if isinstance(spec, dict) else None
        admit = policy.get("admit") if isinstance(policy, dict) else None
        if isinstance(admit, dict) and isinstance(admit.get("rules"), list):
            for rule in admit["rules"]:
                if isinstance(rule, dict) and "when" in rule:
                    rule["when"] = undefined_false(rename(rule["when"], dict(base)))
                if (
                    isinstance(rule, dict)
                    and isinstance(rule.get("else"), dict)
                    and "then" not in rule["else"]
                ):
                    rule["else"] = {"then": rule["else"]}

    def _workbook(self) -> None:
        """Upstream's `workbook` is a list of named tasks (`- name: x, kind: python, ...`, or the
        older `tool: python`); here it is `workbook.tasks` keyed by name."""
        book = self.doc.get("workbook")
        if not isinstance(book, list):
            return
        tasks: dict[str, Any] = {}
        for n, entry in enumerate(book):
            name = entry.get("name", entry.get("task")) if isinstance(entry, dict) else None
            if not isinstance(name, str):
                self.m.cannot(("workbook", n), "a `workbook` entry without a `name`: name it")
                continue
            body = {
                k: v for k, v in entry.items() if k not in ("name", "task", "desc", "description", "assert")
            }
            tool = body.pop("tool", None)
            if isinstance(tool, dict):
                body = {**tool, **body}
            elif isinstance(tool, str) and "kind" not in body:
                body = {"kind": tool, **body}
            if "type" in body and "kind" not in body:
                body = {"kind": body.pop("type"), **body}
            tasks[name] = body
        self.doc["workbook"] = {"tasks": tasks}
        self.m.did(("workbook",), "`workbook` as a list of named tasks became `workbook.tasks` keyed by name")

    def _loop_knobs(self, step: dict[str, Any], path: Path) -> None:
        loop = step.get("loop")
        spec = loop.get("spec") if isinstance(loop, dict) else None
        if not isinstance(spec, dict):
            return
        if spec.get("mode") == "cursor":
            self.m.cannot(
                (*path, "loop", "spec", "mode"),
                "loop `cursor` mode (upstream claims rows from a cursor as it goes) has no translation: "
                "page with a `jump` rule and `set_iter` (docs/examples/pagination.yaml), or loop over "
                "a claimed list",
            )
        value = spec.get("max_in_flight")
        if isinstance(value, str) and "{{" in value:
            key = inner(value)
            known = key.removeprefix("workload.")
            default = (self.doc.get("workload") or {}).get(known) if known.isidentifier() else None
            if isinstance(default, int) and not isinstance(default, bool):
                spec["max_in_flight"] = default
                self.m.did(
                    (*path, "loop", "spec", "max_in_flight"),
                    f"templated `max_in_flight` became the workload's value {default} (a spec is not "
                    "rendered here; a payload that changes it no longer does)",
                )
            else:
                self.m.cannot(
                    (*path, "loop", "spec", "max_in_flight"),
                    "a templated `max_in_flight` has no translation (a spec is not rendered here): "
                    "write a number",
                )
