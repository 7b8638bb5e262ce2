"""Upstream's implicit routing, written out (part of upstream.py's translation): a leaf step
routes to `end`, and a step reached from several branches of an inclusive fan-out is a barrier.
"""

from __future__ import annotations

from typing import Any

from noetl.dsl.migrate.jinja import wrap
from noetl.dsl.migrate.upstream_facts import UpstreamFacts
from noetl.dsl.migrate.upstream_rules import add_writes


class UpstreamRouting(UpstreamFacts):
    """Routing passes; they need only the playbook's facts, not the task rewrite."""

    def _to_end(self) -> None:
        names = {s.get("step") for s in self.steps}
        if "end" not in names:
            return
        for step in self.steps:
            if step.get("step") == "end" or step.get("next"):
                continue
            step["next"] = {"arcs": [self.m.flow({"step": "end"})]}
            self.m.did(
                self.paths[id(step)],
                f"the leaf step `{step.get('step')}` routes to `end` "
                "implicitly upstream: the arc is written out",
            )

    def _targets(self, step: dict[str, Any]) -> list[str]:
        nxt = step.get("next")
        arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
        return [a["step"] for a in arcs or [] if isinstance(a, dict) and isinstance(a.get("step"), str)]

    def _barriers(self) -> None:
        by_name = {str(s.get("step")): s for s in self.steps}
        preds: dict[str, list[str]] = {}
        for s in self.steps:
            for t in self._targets(s):
                if str(s.get("step")) not in preds.setdefault(t, []):
                    preds[t].append(str(s.get("step")))

        def reach(start: str) -> set[str]:
            seen, todo = set(), [start]
            while todo:
                n = todo.pop()
                if n in seen or n not in by_name:
                    continue
                seen.add(n)
                todo += self._targets(by_name[n])
            return seen

        for fan in self.steps:
            nxt = fan.get("next")
            mode = (nxt.get("spec") or {}).get("mode") if isinstance(nxt, dict) else None
            targets = self._targets(fan)
            if mode != "inclusive" or len(set(targets)) < 2:
                continue
            branches = [reach(t) for t in dict.fromkeys(targets)]
            # a predecessor on one branch only: the branches meet at the join (steps after the
            # meeting point are on every branch, and alternatives there are no barrier)
            own = [b - set().union(*(o for o in branches if o is not b)) for b in branches]
            for join, ps in preds.items():
                if join not in by_name or len(ps) < 2:
                    continue
                inside = [p for p in ps if any(p in o for o in own)]
                if len({n for n, o in enumerate(own) for p in inside if p in o}) < 2:
                    continue
                self._join(by_name[join], [by_name[p] for p in inside], str(fan.get("step")))

    def _join(self, join: dict[str, Any], preds: list[dict[str, Any]], fan: str) -> None:
        m = self.m
        name = str(join.get("step"))
        spec = join.setdefault("spec", {})
        policy = spec.setdefault("policy", {})
        if "_joined_" in str(policy.get("admit")):
            return  # the join this migration wrote before: migrating again changes nothing
        if "admit" in policy:
            m.cannot(
                self.paths[id(join)],
                f"`{name}` joins the branches of `{fan}` (upstream: a barrier) "
                "and has its own admission: combine them by hand (admit when every branch's flag is set)",
            )
            return
        flags = []
        for p in preds:
            flag = f"_joined_{name}_{p.get('step')}"
            flags.append(flag)
            tasks = self._tasks(p, self.paths[id(p)])
            if not tasks:
                p["tool"] = [{"name": "arrived", "kind": "noop"}]
                tasks = self._tasks(p, self.paths[id(p)])
            if isinstance(p.get("loop"), dict):
                lspec = p["loop"].setdefault("spec", {})
                lspec.setdefault("policy", {}).setdefault("reducers", {})[flag] = "max"
                add_writes(tasks[-1][1], {"set_ctx": {flag: 1}})
            else:
                add_writes(tasks[-1][1], {"set_ctx": {flag: True}})
        test = " and ".join(f"ctx.{f} | default(false)" for f in flags)
        policy["admit"] = {
            "rules": [
                {"when": wrap(test), "then": m.flow({"allow": True})},
                {"else": {"then": m.flow({"allow": False})}},
            ]
        }
        m.did(
            self.paths[id(join)],
            f"`{name}` is reached from several branches of the inclusive fan-out at "
            f"`{fan}`: upstream runs it once, after all of them (a barrier); it admits only when each "
            f"branch has arrived ({', '.join(str(p.get('step')) for p in preds)} set a flag)",
        )
