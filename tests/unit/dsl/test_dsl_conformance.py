"""The shared conformance cases, validation side: valid ones are clean, invalid ones say why.

Mirrors ``conformance/run.py``: the file's path and name are removed from the output before the
expected texts are looked for, so only the messages can satisfy a check.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.dsl import load_playbook, validate_text

CASES = Path(os.environ.get("NOETL_CONFORMANCE_DIR", "/work/shared/conformance/cases"))
if not CASES.is_dir():
    CASES = Path(__file__).resolve().parents[4] / "shared" / "conformance" / "cases"

pytestmark = pytest.mark.skipif(not CASES.is_dir(), reason="conformance cases not found")


def _playbooks() -> list[Path]:
    if not CASES.is_dir():
        return []
    found = [*CASES.glob("*.yaml"), *(CASES / "lib").glob("*.yaml")]
    return sorted(p for p in found if not p.name.endswith(".expect.yaml"))


def _expect(path: Path) -> dict[str, Any]:
    exp = path.with_name(path.name[: -len(".yaml")] + ".expect.yaml")
    return yaml.safe_load(exp.read_text()) if exp.exists() else {}


VALID = [p for p in _playbooks() if not _expect(p).get("invalid")]
INVALID = [p for p in _playbooks() if _expect(p).get("invalid")]


@pytest.mark.parametrize("path", VALID, ids=[p.stem for p in VALID])
def test_valid_case_has_no_problems(path: Path) -> None:
    text = path.read_text()
    assert [str(p) for p in validate_text(text, str(path))] == []
    assert load_playbook(text, str(path)).workflow


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_case_names_each_expected_text(path: Path) -> None:
    problems = validate_text(path.read_text(), str(path))
    assert problems, "expected the case to be invalid"
    output = "\n".join(str(p) for p in problems)
    text = output.replace(str(path), "").replace(path.name, "").replace(path.stem, "").lower()
    missing = [n for n in _expect(path).get("error_contains") or [] if str(n).lower() not in text]
    assert not missing, f"missing {missing} in:\n{output}"


def test_there_are_cases_of_both_kinds() -> None:
    assert len(VALID) >= 40 and len(INVALID) >= 25
