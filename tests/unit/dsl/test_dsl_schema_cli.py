"""The published schema, the package's public API and the `validate`/`schema` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import noetl.dsl
from noetl.cli.validate_cmd import cmd_schema, cmd_validate
from noetl.dsl.schema import playbook_json_schema
from tests.unit.dsl.helpers import steps

ROOT = Path(__file__).resolve().parents[3]
VALID = steps("- step: start\n  tool: {kind: noop}\n")
INVALID = steps("- step: start\n  tool: [{name: t, kind: warp}]\n", root="vars: {}\n")


def test_public_api_is_pinned() -> None:
    assert sorted(noetl.dsl.__all__) == ["load_playbook", "load_playbook_file", "validate_text"]


def test_schema_is_draft_2020_12_and_closed_at_the_root() -> None:
    schema = playbook_json_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"].startswith("NoETL Playbook")
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == {"apiVersion", "kind", "metadata", "workflow"}
    assert schema["properties"]["apiVersion"]["const"] == "noetl.io/v2"
    defs = schema["$defs"]
    assert defs["Step"]["additionalProperties"] is False
    assert "description" in defs["Step"] and "description" in defs["TaskPolicy"]
    assert "else" in defs["TaskRule"]["properties"] and "in" in defs["Loop"]["properties"]


def test_committed_schema_matches_the_models() -> None:
    committed = json.loads((ROOT / "docs" / "playbook.schema.json").read_text())
    assert committed == playbook_json_schema(), "run: noetl schema --out docs/playbook.schema.json"


def test_validate_prints_every_problem_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(VALID)
    bad.write_text(INVALID)
    assert cmd_validate([str(good)]) == 0
    assert cmd_validate([str(good), str(bad), str(tmp_path / "gone.yaml")]) == 2
    out = capsys.readouterr().out.splitlines()
    assert f"{bad}:4: vars: " in "\n".join(out)
    assert any(
        line.startswith(f"{bad}:") and "workflow[0].tool[0].kind: unknown task kind 'warp'" in line
        for line in out
    )
    assert any(line.startswith(f"{tmp_path / 'gone.yaml'}:0:") and "not found" in line for line in out)


def test_validate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(INVALID)
    assert cmd_validate([str(bad)], as_json=True) == 2
    problems = json.loads(capsys.readouterr().out)
    assert {p["path"] for p in problems} == {"vars", "workflow[0].tool[0].kind"}
    assert set(problems[0]) == {"file", "line", "path", "message"}
    assert cmd_validate([], as_json=True) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_schema_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cmd_schema(None) == 0
    assert json.loads(capsys.readouterr().out) == playbook_json_schema()
    out = tmp_path / "s.json"
    assert cmd_schema(str(out)) == 0
    assert json.loads(out.read_text()) == playbook_json_schema()
