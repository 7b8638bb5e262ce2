"""`noetl check` on the conformance cases: no errors and no warnings on any valid case.

Two cases test dead code on purpose (that a task after an unconditional `break`, or one every
path jumps over, never runs); `check` reports exactly those tasks as hints (dead code that cannot
change a run), which do not make a file unclean. They are pinned here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl.dsl.analysis import check_text

CASES = Path(__file__).resolve().parents[4] / "shared" / "conformance" / "cases"
DELIBERATE = {
    "pipeline_break.yaml": [("task-unreachable", "workflow[0].tool[2]")],  # `three`, after `break`
    "pipeline_jump_python_error.yaml": [("task-jumped-over", "workflow[0].tool[1]")],  # `unreachable`
}


def _valid_cases() -> list[Path]:
    if not CASES.is_dir():
        return []
    files = sorted(CASES.glob("*.yaml")) + sorted((CASES / "lib").glob("*.yaml"))
    return [f for f in files if not f.name.endswith(".expect.yaml") and not f.name.startswith("invalid_")]


@pytest.mark.skipif(not CASES.is_dir(), reason="shared/conformance is not beside the repository")
@pytest.mark.parametrize("case", _valid_cases(), ids=lambda p: p.name)
def test_check_is_clean_on_valid_conformance_cases(case: Path) -> None:
    result = check_text(case.read_text(), str(case))
    assert result.problems == []
    assert result.errors == []
    # the sequential loops that accumulate in ctx are correct as written: that warning is about a
    # later switch to `parallel` (SEMANTICS §20), not about dead code
    assert [w for w in result.warnings if w.code != "ctx-race-if-parallel"] == []
    hints = [(f.code, f.path) for f in result.hints]
    assert hints == DELIBERATE.get(case.name, [])
