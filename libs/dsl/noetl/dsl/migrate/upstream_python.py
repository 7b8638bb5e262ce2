"""Upstream NoETL's python task, in the two forms this engine runs (SEMANTICS §6).

Upstream prepends an import for each `libs` entry (`{pd: pandas}` is `import pandas as pd`,
`{storage: {from: google.cloud, import: storage}}` a from-import), runs the code with the inputs
as globals next to `context` (the whole rendering context) and the modules `os`, `json`,
`datetime`, `uuid`, and resolves the parameters of a `main` it finds from the inputs first and
the context after (a `main(api_url)` without an input gets the workload's `api_url`). Its worker
also accepts a `return` at the top level of the code. Here a python task's code sees its `args`
and nothing else, so every one of those becomes explicit: imports written at the top of the
code, the missing inputs added to `args`, a top-level `return` wrapped into `def main(**args)`.
"""

from __future__ import annotations

import ast
import base64
import re
import textwrap
from pathlib import Path as FsPath
from typing import Any

PRELOADED = ("os", "json", "datetime", "uuid")


def libs_imports(libs: Any) -> tuple[list[str], str | None]:
    """The import lines a `libs` value stands for, or why it cannot be read."""
    lines: list[str] = []
    if not isinstance(libs, dict):
        return [], "`libs` is neither a mapping (alias: module) nor a list of modules"
    for alias, module in libs.items():
        if isinstance(module, str):
            lines.append(f"import {module}" if alias == module else f"import {module} as {alias}")
        elif isinstance(module, dict) and module.get("from") and module.get("import"):
            what, src = module["import"], module["from"]
            lines.append(
                f"from {src} import {what}" if alias == what else f"from {src} import {what} as {alias}"
            )
        else:
            return [], f"`libs.{alias}` is neither a module name nor {{from, import}}"
    return lines, None


def _imported(tree: ast.Module | None, code: str) -> set[str]:
    names: set[str] = set()
    if tree is None:
        for m in re.finditer(r"^\s*(?:import\s+([\w., ]+)|from\s+\S+\s+import\s+([\w, ]+))", code, re.M):
            for part in (m.group(1) or m.group(2) or "").split(","):
                bits = part.split()
                if bits:
                    names.add(bits[-1].split(".")[0])
        return names
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.update(a.asname or a.name for a in node.names)
    return names


def _parse(code: str) -> tuple[ast.Module | None, str | None]:
    try:
        return ast.parse(code), None
    except SyntaxError as e:
        return None, str(e.msg)


def preloaded_used(code: str) -> list[str]:
    """The modules upstream preloads that ``code`` uses without importing them."""
    tree, _ = _parse(code)
    imported = _imported(tree, code)
    used = []
    for name in PRELOADED:
        if name not in imported and re.search(rf"(?<![\w.]){name}\s*\.", code):
            used.append(name)
    return used


def has_top_level_return(code: str) -> bool:
    """Whether the code returns outside any function (a compile error, not a parse error)."""
    try:
        compile(code, "<python task>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return "'return' outside function" in str(e.msg)
    return False


def main_params(code: str) -> list[str] | None:
    """The parameters of a top-level ``def main`` (None when the code defines none)."""
    tree, _ = _parse(code)
    if tree is None:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "main":
            a = node.args
            return [p.arg for p in [*a.posonlyargs, *a.args, *a.kwonlyargs]]
    return None


def wrap_in_main(code: str, names: list[str]) -> str:
    """Code with a top-level `return` as `def main(**args)`: each input bound to its name, the
    code's own body indented, and its `result` variable returned when it falls off the end."""
    body = textwrap.indent(code.rstrip("\n"), "    ")
    binds = "".join(f"    {n} = _args.get({n!r})\n" for n in names if n.isidentifier())
    return (
        "def main(**_args):\n"
        "    # upstream ran this code at the top level, where `return` gave the result\n"
        f"{binds}{body}\n"
        "    return locals().get('result')\n"
    )


def read_script(script: Any, base: FsPath | None) -> tuple[str | None, str]:
    """The source of an upstream `script:` (inline text, or `source: {type: file, path}` read next
    to the playbook), or why migrate cannot fetch it."""
    if isinstance(script, str):
        return script, "inline"
    source = script.get("source") if isinstance(script, dict) else None
    if not isinstance(source, dict):
        return None, "`script` has no `source`"
    kind = source.get("type")
    path = source.get("path") or source.get("file")
    if kind == "file" and isinstance(path, str) and base is not None:
        for candidate in (base / path, FsPath(path)):
            if candidate.is_file():
                return candidate.read_text(encoding="utf-8"), f"the file {path}"
        return None, f"the script file {path!r} was not found next to the playbook"
    return (
        None,
        f"a script from `{kind}` ({path or source.get('uri') or source.get('url')}) is fetched at run time",
    )


def decode_b64(task: dict[str, Any]) -> str | None:
    """The source upstream's `code_b64` / `code_base64` carries (None when absent or not base64)."""
    for key in ("code_b64", "code_base64"):
        if isinstance(task.get(key), str):
            try:
                return base64.b64decode(task[key]).decode("utf-8")
            except ValueError:
                return None
    return None
