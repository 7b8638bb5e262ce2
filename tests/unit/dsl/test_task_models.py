"""One model per task kind: unknown, missing and mistyped fields, knobs in the wrong scope, plug-in
kinds, and the JSON Schema and field reference generated from the same models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, Field

from noetl.dsl import kinds
from noetl.dsl.errors import Problem
from noetl.dsl.kindref import kinds_reference
from noetl.dsl.schema import playbook_json_schema
from noetl.dsl.task_models import BUILTIN_MODELS, KindFields
from tests.unit.dsl.helpers import find, problems, steps

ROOT = Path(__file__).resolve().parents[3]


def tasks(body: str, root: str = "") -> str:
    """A playbook whose start step's `tool:` list is ``body`` (YAML, indented 0)."""
    return steps(
        "- step: start\n  tool:\n" + "".join(f"    {line}\n" for line in body.strip().splitlines()), root
    )


def one(found: list[Problem], path: str, *needles: str) -> Problem:
    problem = find(found, path)
    for needle in needles:
        assert needle in problem.message, f"{needle!r} not in {problem}"
    return problem


# ---- unknown fields ----------------------------------------------------------------------------


def test_duckdb_sql_is_unknown_and_means_query() -> None:
    found = problems(tasks("- name: q\n  kind: duckdb\n  sql: select 1\n"))
    one(found, "workflow[0].tool[0].sql", "unknown field `sql` in a `kind: duckdb` task", "`query`")
    # the missing `query` is the same mistake: reported once, at `sql`
    assert [p.path for p in found] == ["workflow[0].tool[0].sql"]


def test_python_arg_means_args() -> None:
    found = problems(tasks("- name: p\n  kind: python\n  code: 'result = 1'\n  arg: {x: 1}\n"))
    one(found, "workflow[0].tool[0].arg", "unknown field `arg` in a `kind: python` task", "`args`")


def test_close_misspelling_gets_did_you_mean() -> None:
    found = problems(tasks("- name: h\n  kind: http\n  url: http://x\n  hedaers: {a: b}\n"))
    one(found, "workflow[0].tool[0].hedaers", "did you mean `headers`?", "url, method")


@pytest.mark.parametrize(
    ("field", "kind", "needle"),
    [
        ("input: {x: 1}", "python", "`args`"),
        ("input: {x: 1}", "playbook", "`args`"),
        ("input: {x: 1}", "http", "`json`"),
        ("with: {x: 1}", "python", "`args`"),
        ("set: {a: 1}", "noop", "`set_ctx`"),
        ("libs: [json]", "python", "import modules"),
        ("script: {uri: x.py}", "python", "`code`"),
        ("timeout: 5", "noop", "`spec.timeout`"),
        ("auth: pg", "python", "keychain"),
        ("database: db", "postgres", "`auth`"),
        ("table: t", "postgres", "INSERT"),
        ("endpoint: http://x", "http", "`url`"),
        ("payload: {a: 1}", "http", "`json`"),
        ("result: 1", "http", "noop"),
    ],
)
def test_fields_nothing_reads_say_what_to_use(field: str, kind: str, needle: str) -> None:
    required = {
        "python": "code: 'result = 1'",
        "playbook": "path: lib/x",
        "http": "url: http://x",
        "postgres": "command: select 1\n  auth: pg",
        "noop": "result: 1",
    }[kind]
    found = problems(tasks(f"- name: t\n  kind: {kind}\n  {required}\n  {field}\n"))
    key = field.split(":")[0]
    one(found, f"workflow[0].tool[0].{key}", f"unknown field `{key}` in a `kind: {kind}` task", needle)


def test_legacy_task_keys_are_reported_once() -> None:
    found = problems(tasks("- name: t\n  kind: noop\n  eval: [{expr: x}]\n"))
    assert [p.path for p in found] == ["workflow[0].tool[0].eval"]
    assert "not part of the v10 DSL" in found[0].message


def _line_of(text: str, content: str) -> int:
    (line,) = [n for n, written in enumerate(text.splitlines(), 1) if written.strip() == content]
    return line


def test_the_line_is_the_field_s_line() -> None:
    text = tasks("- name: q\n  kind: duckdb\n  params: [1]\n  sql: select 1\n")
    assert one(problems(text), "workflow[0].tool[0].sql").line == _line_of(text, "sql: select 1")


def test_labelled_task_reports_the_field_s_line() -> None:
    text = tasks("- q:\n    kind: duckdb\n    sql: select 1\n")
    assert one(problems(text), "workflow[0].tool[0].sql").line == _line_of(text, "sql: select 1")


# ---- required fields and types -----------------------------------------------------------------


def test_http_without_url() -> None:
    found = problems(tasks("- name: h\n  kind: http\n  method: GET\n"))
    one(found, "workflow[0].tool[0].url", "a `kind: http` task needs `url`", "add it")


@pytest.mark.parametrize(
    ("body", "path", "needle"),
    [
        ("- {name: p, kind: python}", "code", "needs `code`"),
        ("- {name: s, kind: secrets}", "key", "needs `key`"),
        ("- {name: d, kind: duckdb}", "query", "needs `query` or `command`"),
        ("- {name: g, kind: postgres, query: select 1}", "auth", "needs `auth`"),
    ],
)
def test_missing_required_fields(body: str, path: str, needle: str) -> None:
    one(problems(tasks(body)), f"workflow[0].tool[0].{path}", needle)


def test_wrong_types_are_reported_and_templates_pass() -> None:
    bad = tasks("- name: h\n  kind: http\n  url: http://x\n  headers: x\n  params: 5\n")
    found = problems(bad)
    one(found, "workflow[0].tool[0].headers", "must be a mapping or a template", "found 'x'")
    one(found, "workflow[0].tool[0].params", "a mapping, a list or a template")
    good = tasks(
        '- name: h\n  kind: http\n  url: "{{ workload.u }}"\n  headers: "{{ workload.h }}"\n'
        '  params: "{{ workload.p }}"\n'
        '- name: p\n  kind: python\n  code: "result = 1"\n  args: "{{ workload.args }}"\n'
        '- name: g\n  kind: postgres\n  auth: "{{ workload.pg }}"\n  query: select 1\n'
        '  params: "{{ workload.q }}"\n'
        '- name: d\n  kind: duckdb\n  query: "{{ workload.sql }}"\n  params: "{% if true %}[1]{% endif %}"\n'
    )
    assert problems(good) == []


def test_both_of_an_exclusive_pair() -> None:
    found = problems(tasks("- name: h\n  kind: http\n  url: http://x\n  json: {a: 1}\n  body: b\n"))
    one(found, "workflow[0].tool[0]", "has both `json` and `body`")
    found = problems(tasks("- name: d\n  kind: duckdb\n  query: select 1\n  command: select 2\n"))
    one(found, "workflow[0].tool[0]", "has both `query` and `command`")


# ---- workbook ----------------------------------------------------------------------------------

WORKBOOK = """\
workbook:
  tasks:
    q:
      kind: postgres
      query: select 1
    bad:
      kind: duckdb
      sql: select 1
"""


def test_workbook_templates_are_checked_by_the_same_models() -> None:
    found = problems(tasks("- {name: t, kind: noop}", root=WORKBOOK))
    one(found, "workbook.tasks.bad.sql", "unknown field `sql` in a `kind: duckdb` task")
    # `q` leaves `auth` to its callers: not an error of the template itself
    assert all(not p.path.startswith("workbook.tasks.q") for p in found)


def test_workbook_reference_is_checked_as_its_template_kind() -> None:
    found = problems(tasks("- name: t\n  kind: workbook\n  task: q\n  comand: select 2\n", root=WORKBOOK))
    one(found, "workflow[0].tool[0].comand", "template `q` is `kind: postgres`", "did you mean `command`?")
    one(found, "workflow[0].tool[0].auth", "needs `auth`", "workbook.tasks.q")
    declared = "keychain: [{name: pg, kind: postgres_credential}]\n" + WORKBOOK
    ok = tasks("- name: t\n  kind: workbook\n  task: q\n  auth: pg\n  spec: {timeout: 3}\n", root=declared)
    assert [p.path for p in problems(ok) if p.path.startswith("workflow")] == []


def test_workbook_override_with_the_other_sql_name_clashes() -> None:
    text = tasks("- name: t\n  kind: workbook\n  task: q\n  auth: pg\n  command: select 2\n", root=WORKBOOK)
    one(problems(text), "workflow[0].tool[0]", "has both `query` and `command`", "workbook.tasks.q")


# ---- plug-in kinds -----------------------------------------------------------------------------


class QuantumFields(KindFields):
    """`kind: quantum`: a test plug-in."""

    spec_knobs: ClassVar[tuple[str, ...]] = ("shots_cap",)
    hints: ClassVar[dict[str, str]] = {"qubits": "the backend picks the qubits"}

    circuit: str = Field(description="The circuit.")
    shots: int | str | None = Field(None, description="How many runs.")


class PlainFields(BaseModel):
    target: str


@pytest.fixture
def plugins() -> Iterator[None]:
    kinds.register_kind("quantum", QuantumFields)
    kinds.register_kind("plain", PlainFields)
    kinds.register_kind("anything")
    try:
        yield
    finally:
        for name in ("quantum", "plain", "anything"):
            kinds._extra.discard(name)
            kinds._models.pop(name, None)


def test_plugin_kind_with_a_model(plugins: None) -> None:
    found = problems(
        tasks("- name: q\n  kind: quantum\n  shot: 5\n  qubits: 3\n  spec: {shots_cap: 9, x: 1}\n")
    )
    one(found, "workflow[0].tool[0].shot", "did you mean `shots`?")
    one(found, "workflow[0].tool[0].qubits", "the backend picks the qubits")
    one(found, "workflow[0].tool[0].circuit", "needs `circuit`")
    one(found, "workflow[0].tool[0].spec.x", "unknown knob", "shots_cap")
    assert problems(tasks('- {name: q, kind: quantum, circuit: c, shots: "{{ workload.n }}"}')) == []


def test_plugin_kind_with_a_plain_pydantic_model(plugins: None) -> None:
    one(problems(tasks("- {name: p, kind: plain, targ: x}")), "workflow[0].tool[0].targ", "`target`")
    assert problems(tasks("- {name: p, kind: plain, target: x, spec: {any_knob: 1}}")) == []


def test_plugin_kind_without_a_model_accepts_any_field(plugins: None) -> None:
    assert problems(tasks("- {name: a, kind: anything, whatever: 1, spec: {knob: 2}}")) == []


def test_register_kind_stays_backwards_compatible() -> None:
    kinds.register_kind("legacy_plugin")
    try:
        assert "legacy_plugin" in kinds.known_kinds() and kinds.kind_model("legacy_plugin") is None
        kinds.register_kind("http")  # a no-op, as before
        with pytest.raises(ValueError, match="built-in"):
            kinds.register_kind("http", QuantumFields)
        with pytest.raises(TypeError):
            kinds.register_kind("legacy_plugin", dict)  # type: ignore[arg-type]
    finally:
        kinds._extra.discard("legacy_plugin")


# ---- knobs in the wrong scope ------------------------------------------------------------------


def test_loop_knobs_on_a_task_spec() -> None:
    found = problems(
        tasks("- name: t\n  kind: noop\n  spec: {mode: parallel, max_in_flight: 4, exec: local}\n")
    )
    one(found, "workflow[0].tool[0].spec.mode", "loop knob", "loop.spec.mode")
    one(found, "workflow[0].tool[0].spec.max_in_flight", "loop.spec.max_in_flight")
    one(found, "workflow[0].tool[0].spec.exec", "loop.spec.policy.exec")


def test_step_knobs_and_policies_on_a_task_spec() -> None:
    found = problems(
        tasks(
            "- name: t\n  kind: noop\n  spec:\n    pool: gpu\n    max_task_runs: 3\n    retries: 2\n"
            "    policy: {rules: [{else: {then: {do: continue}}}], admit: {rules: []}, limits: {}}\n"
        )
    )
    one(found, "workflow[0].tool[0].spec.pool", "step's `spec.pool`")
    one(found, "workflow[0].tool[0].spec.max_task_runs", "step's `spec.max_task_runs`")
    one(found, "workflow[0].tool[0].spec.retries", "unknown knob", "timeout, policy")
    one(found, "workflow[0].tool[0].spec.policy.admit", "step's `spec.policy.admit`")
    one(found, "workflow[0].tool[0].spec.policy.limits", "spec.policy.limits")


def test_task_knobs_on_a_loop_spec() -> None:
    text = steps(
        "- step: start\n  loop:\n    in: [1]\n    iterator: x\n    spec:\n      exec: local\n"
        "      policy: {rules: [], on_unmatched: fail, failure: {mode: best_effort}}\n"
        "  tool: {kind: noop}\n"
    )
    found = problems(text)
    one(found, "workflow[0].loop.spec.policy.rules", "task's `spec.policy.rules`")
    one(found, "workflow[0].loop.spec.policy.on_unmatched", "task's `spec.policy.on_unmatched`")
    one(found, "workflow[0].loop.spec.policy.failure", "step's `spec.policy.failure`")
    one(found, "workflow[0].loop.spec.exec", "loop.spec.policy.exec")


def test_loop_knobs_on_a_step_and_executor_spec() -> None:
    text = steps(
        "- step: start\n  spec: {exec: local, policy: {max_in_flight: 2}}\n  tool: {kind: noop}\n",
        root="executor: {spec: {mode: parallel}}\n",
    )
    found = problems(text)
    one(found, "workflow[0].spec.exec", "loop.spec.policy.exec")
    one(found, "workflow[0].spec.policy.max_in_flight", "loop.spec.max_in_flight")
    one(found, "executor.spec.mode", "loop.spec.mode")


@pytest.mark.parametrize("timeout", ['"{{ workload.t }}"', "0", "{connect: 1, wait: 2}", "true"])
def test_timeout_is_seconds(timeout: str) -> None:
    found = problems(tasks(f"- name: t\n  kind: noop\n  spec: {{timeout: {timeout}}}\n"))
    assert any(p.path.startswith("workflow[0].tool[0].spec.timeout") for p in found), found


def test_valid_knobs_pass() -> None:
    text = steps(
        "- step: start\n  spec: {pool: default, timeout: 5, max_task_runs: 9}\n"
        "  loop: {in: [1], iterator: x, spec: {mode: parallel, timeout: {read: 3}, policy: {exec: local}}}\n"
        "  tool:\n    - {name: d, kind: duckdb, query: select 1, spec: {database: x.db, timeout: 2}}\n",
        root="executor: {spec: {timeout: {connect: 1, read: 2}, policy: {limits: {max_payload_bytes: 9}}}}\n",
    )
    assert problems(text) == []


# ---- the schema and the reference --------------------------------------------------------------


def _validator(schema: dict[str, Any] | None = None) -> Any:
    """A draft 2020-12 validator (jsonschema comes with the helm extra; skipped without it)."""
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(schema or playbook_json_schema())


def _doc(tool: Any) -> dict[str, Any]:
    return {
        "apiVersion": "noetl.io/v2",
        "kind": "Playbook",
        "metadata": {"name": "t"},
        "workflow": [{"step": "start", "tool": tool}],
    }


def test_schema_has_a_closed_model_per_kind() -> None:
    defs = playbook_json_schema()["$defs"]
    refs = [item["$ref"].rsplit("/", 1)[-1] for item in defs["Task"]["oneOf"]]
    assert refs == [f"{kind.capitalize()}Task" for kind in BUILTIN_MODELS] + ["PluginTask"]
    for kind in BUILTIN_MODELS:
        task = defs[f"{kind.capitalize()}Task"]
        assert task["properties"]["kind"]["const"] == kind
        assert task["additionalProperties"] is (kind == "workbook")
    assert defs["DuckdbTask"]["properties"].keys() >= {"query", "command", "params", "database"}
    assert "url" in defs["HttpTask"]["required"] and "url" not in defs["HttpTaskTemplate"].get("required", [])


def test_schema_rejects_unknown_and_missing_fields() -> None:
    v = _validator()
    assert v.is_valid(_doc({"kind": "duckdb", "query": "select 1"}))
    assert not v.is_valid(_doc({"kind": "duckdb", "sql": "select 1"}))
    assert not v.is_valid(_doc({"kind": "duckdb", "query": "select 1", "sql": "x"}))
    assert not v.is_valid(_doc({"kind": "http", "method": "GET"}))
    assert not v.is_valid(_doc({"kind": "http", "url": "x", "headers": "plain"}))
    assert v.is_valid(_doc({"kind": "http", "url": "x", "headers": "{{ workload.h }}"}))
    assert not v.is_valid(_doc({"kind": "python", "code": "x", "spec": {"mode": "parallel"}}))
    assert v.is_valid(_doc([{"fetch": {"kind": "noop"}}, {"kind": "someplugin", "anything": 1}]))


def test_schema_carries_plugin_models(plugins: None) -> None:
    schema = playbook_json_schema()
    assert "QuantumTask" in schema["$defs"] and "QuantumTaskTemplate" in schema["$defs"]
    assert "quantum" in schema["$defs"]["PluginTask"]["properties"]["kind"]["not"]["enum"]
    v = _validator(schema)
    assert v.is_valid(_doc({"kind": "quantum", "circuit": "c"}))
    assert not v.is_valid(_doc({"kind": "quantum", "circuit": "c", "shot": 1}))
    assert v.is_valid(_doc({"kind": "anything", "x": 1}))


def test_committed_kinds_reference_is_current() -> None:
    committed = (ROOT / "docs" / "task-kinds.md").read_text()
    assert committed == kinds_reference(), "run: noetl schema --kinds --out docs/task-kinds.md"
    for kind, model in BUILTIN_MODELS.items():
        assert f"## {kind}\n" in committed
        for name, info in model.model_fields.items():
            assert f"| `{info.alias or name}` |" in committed


def test_committed_schema_is_current() -> None:
    committed = json.loads((ROOT / "docs" / "playbook.schema.json").read_text())
    assert committed == playbook_json_schema()


def test_schema_command_prints_and_writes_the_reference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from noetl.cli.validate_cmd import cmd_schema

    assert cmd_schema(None, kinds=True) == 0
    assert capsys.readouterr().out == kinds_reference()
    out = tmp_path / "kinds.md"
    assert cmd_schema(str(out), kinds=True) == 0
    assert out.read_text() == kinds_reference()
