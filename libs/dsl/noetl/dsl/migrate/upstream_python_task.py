"""Upstream's python task, rewritten on the task itself (part of upstream.py's translation).

upstream_python.py reads the code (imports, `main` parameters, a top-level `return`); this pass
changes the task: `script:` and base64 code into `code`, `libs` and preloaded modules into
imports, `input_data`, `context` and the `main` parameters upstream fills from the context into
`args`. It needs the playbook's facts (what a bare name resolves to), hence a class.
"""

from __future__ import annotations

import re
from typing import Any

from noetl.dsl.migrate.upstream_facts import UpstreamFacts
from noetl.dsl.migrate.upstream_names import rename
from noetl.dsl.migrate.upstream_python import (
    decode_b64,
    has_top_level_return,
    libs_imports,
    main_params,
    preloaded_used,
    read_script,
    wrap_in_main,
)
from noetl.dsl.yamlload import Path


class UpstreamPython(UpstreamFacts):
    """The python-task rewrite, on top of the playbook's facts."""

    def _python(self, step: dict[str, Any], task: dict[str, Any], where: Path) -> None:
        m = self.m
        code = self._python_source(task, where)
        if not isinstance(code, str):
            return
        args = _d if isinstance(_d := task.get("args"), dict) else {}
        if "input_data" in task:
            args["input_data"] = rename(task.pop("input_data"), self.base_renames(step))
            m.did(
                (*where, "input_data"),
                "python `input_data` became the input `args.input_data` (the code reads it as `input_data`)",
            )
        code = self._python_imports(task, where, code)
        self._main_args(step, where, code, args)
        if has_top_level_return(code):
            code = wrap_in_main(code, list(args))
            m.did((*where, "code"), "the code returns at the top level: wrapped into `def main(**_args)`")
        if args or "args" in task:
            task["args"] = args
        task["code"] = code

    def _python_source(self, task: dict[str, Any], where: Path) -> Any:
        """The code, wherever upstream keeps it: `code`, a `script:` file, or base64."""
        m = self.m
        code = task.get("code")
        if "script" in task:
            src, what = read_script(task["script"], self.base)
            if src is None or isinstance(code, str):
                m.cannot(
                    (*where, "script"),
                    f"python `script`: {what}; migrate cannot bring it in: paste the source into `code`"
                    if src is None
                    else "python has both `script` and `code`: keep one, in `code`",
                )
            else:
                task.pop("script")
                code = task["code"] = src
                m.did((*where, "script"), f"python `script` ({what}) became the task's `code`")
        decoded = decode_b64(task)
        if decoded is not None:
            task.pop("code_b64", None)
            task.pop("code_base64", None)
            code = task["code"] = decoded
            m.did((*where, "code_b64"), "base64 `code_b64` was decoded into `code`")
        return code

    def _python_imports(self, task: dict[str, Any], where: Path, code: str) -> str:
        """``code`` with the imports upstream's worker does for it: `libs` and preloaded modules."""
        m = self.m
        if isinstance(task.get("libs"), list):
            listed = task.pop("libs")
            m.did(
                (*where, "libs"),
                f"python `libs` given as a list ({', '.join(map(str, listed))}) is ignored upstream (its "
                "worker imports only a mapping alias: module): removed; install the packages on the worker",
            )
        if "libs" in task:
            lines, problem = libs_imports(task["libs"])
            if problem:
                m.cannot((*where, "libs"), f"python {problem}: write the imports at the top of `code`")
            else:
                task.pop("libs")
                code = "\n".join(lines) + "\n" + code
                m.did(
                    (*where, "libs"),
                    f"python `libs` became imports at the top of `code` ({'; '.join(lines)})",
                )
        pre = preloaded_used(code)
        if pre:
            code = f"import {', '.join(pre)}\n" + code
            m.did(
                (*where, "code"), f"upstream preloads {', '.join(pre)} for python code: imported at the top"
            )
        return code

    def _main_args(self, step: dict[str, Any], where: Path, code: str, args: dict[str, Any]) -> None:
        """Into ``args``: the `main` parameters and the `context` upstream fills from the context."""
        m = self.m
        params = main_params(code)
        needs_context = re.search(r"(?<![\w.])context\b", code) is not None and "context" not in args
        if params is not None:
            for p in params:
                if p in args or p == "context" or p.startswith("_"):
                    continue
                source = self._resolve(step, p)
                if source is not None:
                    args[p] = source
                    m.did(
                        (*where, "code"),
                        f"`main` parameter `{p}` (upstream fills it from the context) "
                        f"is passed as `args.{p}: {source}`",
                    )
            needs_context = needs_context and "context" in params
        if needs_context:
            args["context"] = self._context()
            m.did(
                (*where, "code"),
                "the code reads upstream's `context`: passed as `args.context` "
                "(workload keys, `workload`, `ctx`, `execution_id`)",
            )

    def _resolve(self, step: dict[str, Any], name: str) -> str | None:
        if name == self._iterator(step):
            return f"{{{{ iter.{name} }}}}"
        if name in self.captured and name != step.get("step"):
            return f"{{{{ ctx.{name} }}}}"
        if name in self.workload:
            return f"{{{{ workload.{name} }}}}"
        return None

    def _context(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: f"{{{{ workload.{k} }}}}" for k in sorted(self.workload)}
        out.update(workload="{{ workload }}", ctx="{{ ctx }}", execution_id="{{ execution_id }}")
        return out
