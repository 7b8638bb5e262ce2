"""The last net of validation built for a playbook's kinds (``noetl.dsl.document_variants``)
must judge every document exactly as the whole model does: same errors, same messages."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from noetl.dsl.document import PlaybookDocument
from noetl.dsl.document_variants import _copy, kinds_in
from noetl.dsl.validate import _document_path

ROOT = Path(__file__).resolve().parents[3]
CASES = ROOT.parent / "shared" / "conformance" / "cases"


def _errors(model: type[BaseModel], data: Any) -> list[tuple[Any, ...]]:
    """What validation reports of them: the document path and the message, in order (a location
    also names the union's members, which differ by construction and are dropped from paths)."""
    try:
        model.model_validate(data)
    except ValidationError as e:
        found = e.errors(include_url=False)
        return [(err["type"], _document_path(data, err["loc"]), err["msg"]) for err in found]
    return []


def _task(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "x"},
            "workflow": [{"step": "start", "tool": [fields]}]}  # fmt: skip


BROKEN = [
    _task(kind="noop", result="ok", bogus=1),
    _task(kind="http", url=3, method="GET"),
    _task(kind=7),
    _task(name="t"),
    _task(kind="postgres", spec={"timeout": "soon", "policy": {"rules": [{"then": {"do": "nope"}}]}}),
    _task(kind="my.plugin", anything=1, spec={"policy": 3}),
    _task(kind="noop", spec={"policy": {"rules": [{"then": {"do": "x"}}]}}, result={"a": [1]}),
    {**_task(kind="workbook", task="w"), "workbook": {"tasks": {"w": {"kind": "workbook", "task": "v"}}}},
    {**_task(kind="workbook", task="w"), "workbook": {"tasks": {"w": {"kind": "python", "code": 1}}}},
    _task(choose=[{"when": "{{ true }}", "do": [{"kind": "noop", "x": 1}]}, {"else": {"do": []}}]),
    _task(**{"while": "{{ true }}", "do": [{"lbl": {"kind": "script", "bad": True}}]}),
    {"apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "x"},
     "workflow": [{"step": "s", "tool": {"kind": "duckdb", "query": 1},
                   "loop": {"in": [], "iterator": "1"}}]},
]  # fmt: skip


def _documents() -> list[Any]:
    found = []
    for folder in (ROOT / "examples", CASES):
        for f in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            if f.name.endswith(".expect.yaml"):
                continue
            try:
                data = yaml.safe_load(f.read_text())
            except yaml.YAMLError:  # a case about unreadable YAML
                continue
            if isinstance(data, dict) and data.get("kind") == "Playbook":
                found.append(data)
    return found


@pytest.mark.parametrize("data", BROKEN)
def test_a_broken_document_gets_the_whole_models_errors(data: Any) -> None:
    narrowed = _copy(kinds_in(data)).PlaybookDocument
    assert _errors(narrowed, data) == _errors(PlaybookDocument, data)
    assert _errors(PlaybookDocument, data)


def test_every_example_and_case_is_judged_alike_and_so_with_a_stray_key_in_each_task() -> None:
    docs = _documents()
    assert docs
    built: dict[frozenset[str], type[BaseModel]] = {}
    for data in docs:
        kinds = kinds_in(data)
        if kinds not in built:
            built[kinds] = _copy(kinds).PlaybookDocument
        assert _errors(built[kinds], data) == _errors(PlaybookDocument, data)
        broken = _stray(copy.deepcopy(data))
        assert _errors(built[kinds], broken) == _errors(PlaybookDocument, broken)


def _stray(node: Any) -> Any:
    """Every task (every mapping with a ``kind``) given a key no model knows."""
    if isinstance(node, dict):
        for value in node.values():
            _stray(value)
        if "kind" in node:
            node["stray"] = 1
    elif isinstance(node, list):
        for value in node:
            _stray(value)
    return node
