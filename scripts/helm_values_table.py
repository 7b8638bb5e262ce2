"""Writes the values table of docs/helm.md from deploy/helm/noetl/values.yaml's `## @section` and
`## @param` comments (tests/helm/test_chart_contract.py checks the two agree).

    .venv/bin/python scripts/helm_values_table.py
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
VALUES = ROOT / "deploy" / "helm" / "noetl" / "values.yaml"
DOC = ROOT / "docs" / "helm.md"
HEADER = "| name | description | default |\n|---|---|---|\n"


def _cell(value: Any) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if value is None:
        return "`null`"
    if value == "":
        return '`""`'
    if isinstance(value, dict | list):
        return "see values.yaml" if value else f"`{yaml.safe_dump(value, default_flow_style=True).strip()}`"
    return f"`{value}`"


def table() -> str:
    text = VALUES.read_text()
    defaults = yaml.safe_load(text)
    rows = []
    for m in re.finditer(r"^\s*## @(section|param) (.*)$", text, re.M):
        if m.group(1) == "section":
            rows.append(f"| **{m.group(2).strip()}** | | |")
            continue
        param, description = m.group(2).split(" ", 1)
        node: Any = defaults
        for part in param.split("."):
            node = node[part]
        rows.append(f"| `{param}` | {description} | {_cell(node)} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> None:
    doc = DOC.read_text()
    start = doc.index(HEADER)
    end = doc.index("\n\n", start)
    DOC.write_text(doc[:start] + table().rstrip("\n") + doc[end:])


if __name__ == "__main__":
    main()
