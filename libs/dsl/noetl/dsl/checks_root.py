"""Checks for the document root and for the workflow as a whole (names, start, arcs)."""

from __future__ import annotations

from typing import Any

from noetl.dsl import legacy
from noetl.dsl.checks_rules import check_no_control, check_pool
from noetl.dsl.checks_step import StepInfo, check_step
from noetl.dsl.checks_task import PipelineContext, check_task
from noetl.dsl.closed import EXECUTOR_KEYS, KEYCHAIN_ENTRY_KEYS, METADATA_KEYS, check_closed
from noetl.dsl.knobs import check_executor_spec
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.yamlload import fmt_path

API_VERSION = "noetl.io/v2"
ROOT_KEYS = ("apiVersion", "kind", "metadata", "keychain", "executor", "workload", "workflow", "workbook")
METADATA_TEXT = ("path", "description")


def check_document(doc: dict[str, Any], r: Report) -> None:
    for key in doc:
        if key == "vars":
            r.add((key,), legacy.ROOT_VARS)
        elif key not in ROOT_KEYS:
            r.add((key,), f"unknown root key {describe(key)}: a playbook has only {', '.join(ROOT_KEYS)}")
    _check_header(doc, r)
    _check_keychain(doc.get("keychain"), r)
    executor = doc.get("executor")
    if executor is not None and not isinstance(executor, dict):
        r.add(("executor",), f"`executor` is a mapping (`{{spec: {{...}}}}`), found {type_name(executor)}")
    if isinstance(executor, dict):
        check_closed(executor, ("executor",), EXECUTOR_KEYS, "`executor`", r)
    if isinstance(executor, dict) and executor.get("spec") is not None:
        if isinstance(executor["spec"], dict):
            check_no_control(executor["spec"], ("executor", "spec"), "executor policy", r)
            check_pool(executor["spec"], ("executor", "spec"), r)
            check_executor_spec(executor["spec"], ("executor", "spec"), r)
        else:
            r.add(("executor", "spec"), f"`executor.spec` is a mapping, found {type_name(executor['spec'])}")
    if doc.get("workload") is not None and not isinstance(doc["workload"], dict):
        r.add(("workload",), f"`workload` is a mapping of input defaults, found {type_name(doc['workload'])}")
    workbook = _check_workbook(doc.get("workbook"), r)
    _check_workflow(doc, workbook, r)


def _check_header(doc: dict[str, Any], r: Report) -> None:
    version = doc.get("apiVersion")
    if "apiVersion" not in doc:
        r.add(("apiVersion",), f"`apiVersion` is required: `apiVersion: {API_VERSION}`")
    elif version != API_VERSION:
        r.add(("apiVersion",), f"apiVersion must be {API_VERSION}, found {describe(version)}")
    if "kind" not in doc:
        r.add(("kind",), "`kind` is required: `kind: Playbook`")
    elif doc["kind"] != "Playbook":
        r.add(("kind",), f"kind must be Playbook, found {describe(doc['kind'])}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict):
        found = "missing" if "metadata" not in doc else f"{type_name(meta)}"
        r.add(("metadata",), f"`metadata` is required, a mapping with at least `metadata.name` ({found})")
        return
    name = meta.get("name")
    if not isinstance(name, str) or not name.strip():
        r.add(("metadata", "name"), "`metadata.name` is required: a non-empty string naming the playbook")
    check_closed(meta, ("metadata",), METADATA_KEYS, "`metadata`", r, elsewhere=False)
    for key in METADATA_TEXT:
        if meta.get(key) is not None and not isinstance(meta[key], str):
            r.add(("metadata", key), f"`metadata.{key}` is a string, found {type_name(meta[key])}")
    version_value = meta.get("version")
    if version_value is not None and (
        isinstance(version_value, bool) or not isinstance(version_value, str | int | float)
    ):
        r.add(
            ("metadata", "version"),
            f'`metadata.version` is a string such as "1.0", found {type_name(version_value)}',
        )


def _check_keychain(keychain: Any, r: Report) -> None:
    if keychain is None:
        return
    if not isinstance(keychain, list):
        r.add(("keychain",), f"`keychain` is a list of `{{name, kind}}` entries, found {type_name(keychain)}")
        return
    seen: set[str] = set()
    for i, entry in enumerate(keychain):
        path = ("keychain", i)
        if not isinstance(entry, dict):
            r.add(path, f"a keychain entry is a mapping `{{name: ..., kind: ...}}`, found {type_name(entry)}")
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            r.add((*path, "name"), "a keychain entry needs `name: <credential name>`")
        elif name in seen:
            r.add((*path, "name"), f"keychain entry {name!r} is declared twice")
        else:
            seen.add(name)
        check_closed(entry, path, KEYCHAIN_ENTRY_KEYS, "a keychain entry", r, elsewhere=False)
        if not isinstance(entry.get("kind"), str) or not entry["kind"]:
            r.add(
                (*path, "kind"), "a keychain entry needs `kind: <credential kind>` (e.g. postgres_credential)"
            )


def _check_workbook(workbook: Any, r: Report) -> dict[str, Any]:
    """Check ``workbook`` and return its tasks (empty when unusable), for ``kind: workbook`` lookups."""
    if workbook is None:
        return {}
    if not isinstance(workbook, dict):
        r.add(
            ("workbook",),
            f"`workbook` is a mapping `{{tasks: {{<name>: {{kind: ...}}}}}}`, found {type_name(workbook)}",
        )
        return {}
    for key in workbook:
        if key != "tasks":
            r.add(("workbook", key), f"unknown key {describe(key)} in `workbook`: it has only `tasks`")
    tasks = workbook.get("tasks")
    if tasks is None:
        return {}
    if not isinstance(tasks, dict):
        r.add(("workbook", "tasks"), f"`workbook.tasks` maps task names to tasks, found {type_name(tasks)}")
        return {}
    for name, task in tasks.items():
        path = ("workbook", "tasks", name)
        if isinstance(task, dict):
            if "name" in task and not isinstance(task["name"], str):
                r.add((*path, "name"), f"a task name is a string, found {type_name(task['name'])}")
            check_task(task, path, None, PipelineContext(), r, in_workbook=True)
        else:
            r.add(path, f"a workbook task is a mapping with `kind`, found {type_name(task)}")
    return tasks


def _check_workflow(doc: dict[str, Any], workbook: dict[str, Any], r: Report) -> None:
    workflow = doc.get("workflow")
    if "workflow" not in doc:
        r.add(
            ("workflow",), "`workflow` is required: a non-empty list of steps, starting with the step `start`"
        )
        return
    if not isinstance(workflow, list):
        r.add(("workflow",), f"`workflow` is a list of steps, found {type_name(workflow)}")
        return
    if not workflow:
        r.add(("workflow",), "`workflow` is empty: add at least the entry step `- step: start`")
        return
    infos: list[StepInfo] = [
        check_step(step, ("workflow", i), workbook, r) for i, step in enumerate(workflow)
    ]
    first: dict[str, int] = {}
    for i, info in enumerate(infos):
        if info.name is None:
            continue
        if info.name in first:
            r.add(
                ("workflow", i),
                f"duplicate step name {info.name!r} (first at "
                f"{fmt_path(('workflow', first[info.name]))}): step names must be unique",
            )
        else:
            first[info.name] = i
    if "start" not in first:
        r.add(("workflow",), "no step is named `start`: the step named start is the workflow's entry point")
    names = ", ".join(sorted(first)[:20]) + (", ..." if len(first) > 20 else "")
    for info in infos:
        for path, target in info.arcs:
            if target not in first:
                r.add(path, f"arc to unknown step {target!r}: no step has that name (steps: {names})")
