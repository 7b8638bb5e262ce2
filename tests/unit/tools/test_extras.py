"""asyncpg and DuckDB are extras (issue 30): a worker without one refuses that kind's tasks in
one line naming the extra to install, instead of a ModuleNotFoundError from deep inside."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from noetl.dsl.errors import ToolError
from noetl.worker.tools.base import _LAZY, get_tool, register_lazy


@pytest.mark.parametrize(("package", "extra"), [("asyncpg", "postgres"), ("duckdb", "duckdb")])
def test_a_missing_extra_is_named(
    package: str, extra: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = f"noetl_test_needs_{package}"
    (tmp_path / f"{module}.py").write_text(f"import {package}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(sys.modules, package, None)  # as if not installed
    register_lazy(f"needs_{package}", module)
    try:
        with pytest.raises(ToolError, match=rf"needs the {package} package.*noetl-jetstream\[{extra}\]"):
            get_tool(f"needs_{package}")
    finally:
        _LAZY.pop(f"needs_{package}", None)
        sys.modules.pop(module, None)
