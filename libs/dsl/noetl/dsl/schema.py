"""The playbook JSON Schema, generated from the pydantic document models.

Generated rather than hand-written so editors (the YAML language server), CI linters and the
validator all read one contract. ``docs/playbook.schema.json`` is this output; a test fails
when the two drift, and ``noetl schema --out docs/playbook.schema.json`` regenerates it.

A task is one of the kinds' models, chosen by `kind` (``$defs.Task``; a `workbook.tasks` entry
is one of ``$defs.TaskTemplate``, whose fields are all optional). Plug-in kinds registered with a
model when the schema is generated get a definition of their own; any other kind matches
``PluginTask``, which is open.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from noetl.dsl.document import PlaybookDocument, task_model
from noetl.dsl.kinds import plugin_models

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
_REF = "#/$defs/"
_UNIONS = {
    "Task": "A task: `kind` picks the model of its fields.",
    "TaskTemplate": "A `workbook.tasks` template: a task whose fields a `kind: workbook` task may complete.",
}


def _union_name(node: dict[str, Any]) -> str | None:
    """``Task`` or ``TaskTemplate`` when ``node`` is pydantic's inline spelling of that union."""
    if set(node) != {"oneOf"}:
        return None
    refs = [item.get("$ref", "") for item in node["oneOf"] if isinstance(item, dict)]
    if len(refs) != len(node["oneOf"]) or not refs or refs[-1] != f"{_REF}PluginTask":
        return None
    return "TaskTemplate" if refs[0].endswith("TaskTemplate") else "Task"


def _name_unions(node: Any, defs: dict[str, Any]) -> Any:
    """Replace each inline task union with a reference to one named definition."""
    if isinstance(node, list):
        return [_name_unions(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    name = _union_name(node)
    if name is not None:
        defs.setdefault(name, {"description": _UNIONS[name], "oneOf": node["oneOf"]})
        return {"$ref": f"{_REF}{name}"}
    return {key: _name_unions(value, defs) for key, value in node.items()}


def _add_plugin(defs: dict[str, Any], kind: str, fields: type[BaseModel]) -> None:
    closed = fields.model_config.get("extra") != "allow"
    for union, template in (("Task", False), ("TaskTemplate", True)):
        model = task_model(kind, fields, template)
        schema = model.model_json_schema(by_alias=True, mode="validation", ref_template=_REF + "{model}")
        for name, definition in schema.pop("$defs", {}).items():
            defs.setdefault(name, definition)
        if closed:
            schema["additionalProperties"] = False
        defs[model.__name__] = schema
        defs[union]["oneOf"].insert(-1, {"$ref": f"{_REF}{model.__name__}"})
    defs["PluginTask"]["properties"]["kind"]["not"]["enum"].append(kind)


def playbook_json_schema() -> dict[str, Any]:
    schema = PlaybookDocument.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Any] = {}
    schema = _name_unions(schema, defs)
    schema["$defs"].update(defs)
    for kind, fields in plugin_models().items():
        _add_plugin(schema["$defs"], kind, fields)
    schema["$defs"] = dict(sorted(schema["$defs"].items()))
    return {
        "$schema": SCHEMA_DIALECT,
        "title": "NoETL Playbook (apiVersion noetl.io/v2, DSL v10)",
        **{k: v for k, v in schema.items() if k != "title"},
    }


def schema_text() -> str:
    return json.dumps(playbook_json_schema(), indent=2, sort_keys=False) + "\n"


def write_schema(path: str | Path) -> None:
    Path(path).write_text(schema_text(), encoding="utf-8")
