"""Every keychain entry a task names is declared (issue 27).

The server resolves exactly the declared entries before the workflow starts (SEMANTICS §12), so
a task's ``auth: pg_mian`` or ``{{ keychain.pg_mian.password }}`` naming no declared entry
passes every static check and fails only at run time, after the steps before it ran, with
``keychain_unresolved``. Both forms are literal in the document, so validation catches them.
"""

from __future__ import annotations

import difflib
from typing import Any

from jinja2 import nodes
from jinja2.sandbox import SandboxedEnvironment

from noetl.dsl.report import Report
from noetl.dsl.shapes import task_entries
from noetl.dsl.yamlload import Path

_env = SandboxedEnvironment()


def declared_names(doc: dict[str, Any]) -> set[str] | None:
    """The declared entry names; None when ``keychain`` is malformed (reported elsewhere)."""
    keychain = doc.get("keychain")
    if keychain is None:
        return set()
    if not isinstance(keychain, list):
        return None
    return {e["name"] for e in keychain if isinstance(e, dict) and isinstance(e.get("name"), str)}


def template_names(text: str) -> list[str]:
    """The entry names a template reads literally: ``keychain.x`` and ``keychain['x']``."""
    if "keychain" not in text or not any(m in text for m in ("{{", "{%")):
        return []
    try:
        tree = _env.parse(text)
    except Exception:
        return []  # reported by the template check
    found: list[str] = []
    for node in tree.find_all((nodes.Getattr, nodes.Getitem)):
        base = node.node  # type: ignore[attr-defined]
        if not (isinstance(base, nodes.Name) and base.name == "keychain"):
            continue
        if isinstance(node, nodes.Getattr):
            found.append(node.attr)
        elif isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):  # type: ignore[attr-defined]
            found.append(node.arg.value)  # type: ignore[attr-defined]
    return found


def _missing(name: str, declared: set[str], path: Path, how: str, r: Report) -> None:
    if name in declared:
        return
    close = difflib.get_close_matches(name, sorted(declared), n=1)
    hint = f"did you mean `{close[0]}`? " if close else ""
    have = ", ".join(sorted(declared)) if declared else "none"
    r.add(
        path,
        f"{how} names keychain entry {name!r}, which the playbook does not declare: {hint}declare it in "
        f"the root `keychain` (`- {{name: {name}, kind: ...}}`) so the server resolves it before the "
        f"workflow starts (declared: {have})",
    )


def _walk(value: Any, path: Path, declared: set[str], r: Report) -> None:
    stack: list[tuple[Any, Path]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            for name in template_names(node):
                _missing(name, declared, where, f"`keychain.{name}`", r)
        elif isinstance(node, dict):
            stack.extend((v, (*where, k)) for k, v in node.items() if k not in ("code", "script"))
        elif isinstance(node, list):
            stack.extend((v, (*where, i)) for i, v in enumerate(node))


def _task(body: Any, path: Path, declared: set[str], r: Report) -> None:
    if not isinstance(body, dict):
        return
    auth = body.get("auth")
    if isinstance(auth, str) and not any(m in auth for m in ("{{", "{%")):
        _missing(auth, declared, (*path, "auth"), f"`auth: {auth}`", r)
    key = body.get("key")
    if body.get("kind") == "secrets" and isinstance(key, str) and not any(m in key for m in ("{{", "{%")):
        _missing(key, declared, (*path, "key"), f"the secrets task's `key: {key}`", r)
    _walk({k: v for k, v in body.items() if k != "auth" or not isinstance(auth, str)}, path, declared, r)
    if isinstance(auth, str):
        _walk(auth, (*path, "auth"), declared, r)


def check_keychain_refs(doc: dict[str, Any], r: Report) -> None:
    """``auth: <name>`` and ``keychain.<name>`` in tasks and workbook templates name declared entries."""
    declared = declared_names(doc)
    if declared is None:
        return
    workbook = doc.get("workbook")
    tasks = workbook.get("tasks") if isinstance(workbook, dict) else None
    if isinstance(tasks, dict):
        for name, body in tasks.items():
            _task(body, ("workbook", "tasks", name), declared, r)
    workflow = doc.get("workflow")
    if not isinstance(workflow, list):
        return
    for i, step in enumerate(workflow):
        if not isinstance(step, dict):
            continue
        for entry in task_entries(step.get("step"), step.get("tool"), ("workflow", i)):
            if entry.body is not None:
                _task(entry.body, entry.path, declared, r)
