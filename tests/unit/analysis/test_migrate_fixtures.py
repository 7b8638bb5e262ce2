"""Every example of the older drafts migrates into a v10 playbook, valid unless the draft leaves out
a field its kind needs (which validation then names), and migrating the output again changes
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl.dsl import kinds, validate_text
from noetl.dsl.migrate import migrate_text

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "legacy"
CASES = Path(__file__).resolve().parents[4] / "shared" / "conformance" / "cases"
LEGACY_CASES = [
    "invalid_legacy_case",
    "invalid_legacy_eval",
    "invalid_legacy_retry",
    "invalid_sink",
    "invalid_step_vars",
    "invalid_step_when",
    "invalid_next_list",
    "invalid_next_mode",
    "invalid_root_vars",
]

# what each example keeps that v10 has no form for (counted, so a regression shows)
UNTRANSLATED = {
    "004_canonical_shape.yaml": 2,  # two `then: ...` placeholders
    "004_case_shape.yaml": 4,  # `loop: ...`, `tool: ...`, two `then: ...`
    "004_loop_example.yaml": 1,
    "004_mixed_layers.yaml": 7,  # every value is `...`
    "004_s1_1_step_shape_case.yaml": 5,  # collect, call, collect, result, and `pages` they made
    "004_s1_3_paginated_http.yaml": 5,
    "004_s2_3_loop_args_transition.yaml": 1,  # the iterator in an arc's args (004 itself says no)
}

# fields a kind needs that the draft does not give: the migrated playbook is valid but for them
INCOMPLETE = {
    "001_s8_vars_fetch_user.yaml": ["workflow[1].tool[0].auth"],  # a postgres task without credentials
    "004_mixed_layers.yaml": ["workflow[1].tool[0].url"],  # `url: ...` is a placeholder
    "002_s13_minimal_step.yaml": ["workflow[1].tool[2].auth"],  # `auth: pg_k8s`, never declared
}


@pytest.fixture
def quantum_kind() -> Iterator[None]:
    """Spec 001's example uses `kind: quantum`, a plug-in kind the drafts allow (§2.3)."""
    kinds.register_kind("quantum")
    try:
        yield
    finally:
        kinds._extra.discard("quantum")


@pytest.mark.parametrize("fixture", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_migrates_to_a_valid_playbook(fixture: Path, quantum_kind: None) -> None:
    result = migrate_text(fixture.read_text(), fixture.name)
    assert result.text is not None
    assert [p.path for p in result.problems] == INCOMPLETE.get(fixture.name, []), [
        str(p) for p in result.problems
    ]
    assert validate_text(result.text, fixture.name) == result.problems
    assert len(result.untranslated) == UNTRANSLATED.get(fixture.name, 0), [
        str(n) for n in result.untranslated
    ]
    again = migrate_text(result.text, fixture.name)
    assert again.text == result.text and [n for n in again.notes if not n.untranslated] == []


def test_fixtures_cover_the_three_drafts() -> None:
    names = [p.name for p in FIXTURES.glob("*.yaml")]
    assert {n[:3] for n in names} == {"001", "002", "004"} and len(names) == 14


@pytest.mark.skipif(not CASES.is_dir(), reason="shared/conformance is not beside the repository")
@pytest.mark.parametrize("case", LEGACY_CASES)
def test_conformance_legacy_cases_migrate(case: str) -> None:
    text = (CASES / f"{case}.yaml").read_text()
    assert validate_text(text, case)  # invalid as written
    result = migrate_text(text, case)
    # the sink names a table but no statement or credentials: a note says to write the INSERT,
    # and validation asks for the fields a postgres task needs
    missing = ["workflow[0].tool[1].auth", "workflow[0].tool[1].query"] if case == "invalid_sink" else []
    assert [p.path for p in result.problems] == missing and result.notes
    assert [n.message[:20] for n in result.untranslated] == (
        ["the postgres sink na"] if case == "invalid_sink" else []
    )


def test_v10_playbook_is_returned_unchanged() -> None:
    legacy = (FIXTURES / "002_s1_2_root_layout.yaml").read_text()
    text = legacy.replace("executor:\n  kind: distributed\n", "executor:\n")
    assert text != legacy
    result = migrate_text(text, "x.yaml")
    assert result.text == text and result.notes == []


def test_executor_kind_of_spec_002_is_dropped_with_a_note() -> None:
    result = migrate_text((FIXTURES / "002_s1_2_root_layout.yaml").read_text(), "x.yaml")
    assert result.text is not None and "kind: distributed" not in result.text and not result.problems
    assert any("executor.kind" in str(n) for n in result.notes), result.notes
