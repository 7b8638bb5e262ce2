"""The playbook JSON Schema, generated from the pydantic document models.

Generated rather than hand-written so editors (the YAML language server), CI linters and the
validator all read one contract. ``docs/playbook.schema.json`` is this output; a test fails
when the two drift, and ``noetl schema --out docs/playbook.schema.json`` regenerates it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from noetl.dsl.document import PlaybookDocument

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def playbook_json_schema() -> dict[str, Any]:
    schema = PlaybookDocument.model_json_schema(by_alias=True, mode="validation")
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "NoETL Playbook (apiVersion noetl.io/v2, DSL v10)",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def schema_text() -> str:
    return json.dumps(playbook_json_schema(), indent=2, sort_keys=False) + "\n"


def write_schema(path: str | Path) -> None:
    Path(path).write_text(schema_text(), encoding="utf-8")
