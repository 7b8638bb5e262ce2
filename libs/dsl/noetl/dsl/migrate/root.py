"""The document around the steps: header, root `vars`, fragments, and the `end` convention.

A spec example is often a few steps, not a playbook: such a fragment is wrapped in a playbook
(header, a `start` router to its first step, a noop stub for each step it routes to but does
not define), and the notes say so. Spec 001's convention that routing to `end` finishes the
execution is v10's step without arcs: arcs to an undefined `end` are dropped.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any

from noetl.dsl.migrate.core import Migrator
from noetl.dsl.migrate.steps import translate_step

ROOT_ORDER = ("apiVersion", "kind", "metadata", "keychain", "executor", "workload", "workflow", "workbook")
_META = ("name", "path", "version", "description")


def wrap_fragment(m: Migrator, data: Any) -> dict[str, Any] | None:
    if isinstance(data, dict) and "step" in data:
        steps: list[Any] = []
        m.put(steps, None, data, ())
    elif isinstance(data, list):
        steps = data
    else:
        return data if isinstance(data, dict) else None
    doc: dict[str, Any] = {}
    name = PurePath(m.file).stem.replace(".", "_") or "migrated"
    doc["apiVersion"], doc["kind"] = "noetl.io/v2", "Playbook"
    doc["metadata"] = {"name": name, "path": f"migrated/{name}"}
    m.put(doc, "workflow", steps, None)
    m.did(
        (),
        "the document is a list of steps, not a playbook: wrapped in a playbook (apiVersion, kind, metadata)",
    )
    return doc


def _header(m: Migrator, doc: dict[str, Any]) -> None:
    if doc.get("apiVersion") != "noetl.io/v2":
        m.did(("apiVersion",), f"apiVersion {doc.get('apiVersion')!r} → 'noetl.io/v2'")
        m.put(doc, "apiVersion", "noetl.io/v2", m.origin(doc, "apiVersion"))
    if doc.get("kind") != "Playbook":
        m.put(doc, "kind", "Playbook", m.origin(doc, "kind"))
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        m.put(doc, "metadata", meta, m.origin(doc, "metadata"))
    for key in _META:
        if key in doc:
            m.put(meta, key, doc.pop(key), m.origin(doc, key))
            m.did((key,), f"root `{key}` moved to `metadata.{key}`")
    if "name" not in meta:
        meta["name"] = PurePath(m.file).stem.replace(".", "_") or "migrated"
        m.did(("metadata",), f"added `metadata.name: {meta['name']}`")
    executor = doc.get("executor")
    if isinstance(executor, dict) and "kind" in executor:  # spec 002 §1.2: `executor.kind: distributed`
        kind = executor.pop("kind")
        m.did(
            ("executor", "kind"),
            f"`executor.kind: {kind}` dropped: v10's executor has only `spec`; placement is chosen per loop "
            "(`loop.spec.policy.exec`) and per step (`spec.pool`)",
        )


def _root_vars(m: Migrator, doc: dict[str, Any], written: set[str]) -> None:
    if "vars" not in doc:
        return
    values = doc.pop("vars")
    if not isinstance(values, dict):
        m.cannot(("vars",), "root `vars` that is not a mapping; dropped")
        return
    workload = doc.get("workload")
    if not isinstance(workload, dict):
        workload = {}
        m.put(doc, "workload", workload, ("vars",))
    for key, value in values.items():
        if key in workload:
            m.cannot(("vars", key), f"root var `{key}` is also a workload key: the workload value is kept")
            continue
        m.put(workload, key, value, ("vars", key))
        if key not in written:
            m.var_renames[f"vars.{key}"] = f"workload.{key}"
    m.did(
        ("vars",),
        "root `vars` are inputs: they moved to `workload` (`vars.x` reads `workload.x`; "
        "values steps write live in `ctx`)",
    )


def _written_vars(steps: list[Any]) -> set[str]:
    """Names the steps write as vars (step `vars`, `set_vars`, `set` actions): they become ctx."""
    out: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("vars", "set_vars", "set_shared") and isinstance(value, dict):
                    out.update(value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    for step in steps:
        if isinstance(step, dict):
            walk({k: v for k, v in step.items() if k != "step"})
    return out


def _ends_and_stubs(m: Migrator, doc: dict[str, Any], fragment: bool) -> None:
    steps = doc["workflow"]
    names = [s.get("step") for s in steps if isinstance(s, dict)]
    for i, step in enumerate(steps):
        nxt = step.get("next") if isinstance(step, dict) else None
        arcs = nxt.get("arcs") if isinstance(nxt, dict) else None
        if not isinstance(arcs, list):
            continue
        keep = [
            a for a in arcs if not (isinstance(a, dict) and a.get("step") == "end" and "end" not in names)
        ]
        if len(keep) != len(arcs):
            m.did(
                (*(m.origin(steps, i) or ("workflow", i)), "next"),
                "an arc to `end` (the older drafts' way to finish) was dropped: "
                "a step without arcs ends the execution",
            )
            origins = [m.origin(arcs, n) for n, a in enumerate(arcs) if a in keep]
            arcs[:] = keep
            for n, origin in enumerate(origins):
                m.o.set(arcs, n, origin)
            if not keep:
                step.pop("next")
                if not step.get("tool"):
                    m.put(step, "tool", m.flow({"kind": "noop"}), None)
    if "start" not in names and names:
        first = next(n for n in names if isinstance(n, str))
        steps.insert(0, {"step": "start", "next": {"arcs": [m.flow({"step": first})]}})
        for n in range(len(steps) - 1, 0, -1):
            m.o.set(steps, n, m.origin(steps, n - 1))
        m.o.set(steps, 0, None)
        m.did(
            ("workflow",),
            f"added a `start` step routing to `{first}` (the entry point is the step named start)",
        )
    if not fragment:
        return
    names = [s.get("step") for s in steps if isinstance(s, dict)]
    missing = []
    for step in list(steps):
        nxt = step.get("next") if isinstance(step, dict) else None
        for arc in (nxt.get("arcs") or []) if isinstance(nxt, dict) else []:
            target = arc.get("step") if isinstance(arc, dict) else None
            if isinstance(target, str) and target not in names and target not in missing:
                missing.append(target)
    for target in missing:
        steps.append(
            {
                "step": target,
                "desc": "stub added by noetl migrate: the example routes here",
                "tool": m.flow({"kind": "noop"}),
            }
        )
        m.did(
            ("workflow",),
            f"added a noop stub for step `{target}`, which the example routes to but does not define",
        )


def translate_document(m: Migrator, data: Any) -> dict[str, Any] | None:
    fragment = not (isinstance(data, dict) and "step" not in data)
    doc = wrap_fragment(m, data)
    if doc is None:
        return None
    steps = doc.get("workflow")
    if not isinstance(steps, list):
        m.cannot(("workflow",), "no `workflow` list: nothing to migrate")
        return doc
    _header(m, doc)
    _root_vars(m, doc, _written_vars(steps))
    for i, step in enumerate(steps):
        if isinstance(step, dict):
            steps[i] = translate_step(m, step, m.origin(steps, i) or ("workflow", i))
    _ends_and_stubs(m, doc, fragment)
    return m.reorder(doc, ROOT_ORDER)
