"""Upstream NoETL's dialect: what each construct becomes, what is refused, and what `noetl
validate`, `noetl check` and `noetl migrate` say of such a file.

The runs that show the migrated playbooks mean what upstream meant are in
tests/unit/server/test_migrate_upstream_run.py; these are the static checks.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml

from noetl.cli.main import main
from noetl.dsl.migrate import migrate_text

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: u}\n"


def migrate(body: str, dialect: str = "upstream") -> tuple[dict[str, Any], list[str], Any]:
    text = HEAD + textwrap.dedent(body).lstrip("\n")
    result = migrate_text(text, "u.yaml", dialect=dialect)
    assert result.text is not None
    return yaml.safe_load(result.text), [str(n) for n in result.notes], result


def test_auth_without_keychain_declares_it_and_inline_auth_becomes_a_name() -> None:
    doc, notes, result = migrate("""
        workflow:
          - step: start
            tool:
              - {name: q, kind: postgres, auth: {type: postgres, credential: pg_main}, query: "select 1"}
              - {name: h, kind: http, url: "http://x", auth: api_token}
        """)
    assert not result.problems, [str(p) for p in result.problems]
    assert doc["keychain"] == [
        {"name": "pg_main", "kind": "postgres_credential"},
        {"name": "api_token", "kind": "http_credential"},
    ]
    assert doc["workflow"][0]["tool"][0]["auth"] == "pg_main"
    assert any("does not declare" in n for n in notes)


def test_a_declared_keychain_entry_is_not_added_twice() -> None:
    doc, _, _ = migrate("""
        keychain: [{name: pg_main, kind: postgres_credential}]
        workflow:
          - step: start
            tool: {kind: postgres, auth: pg_main, query: "select 1", input: {x: 1}}
        """)
    assert doc["keychain"] == [{"name": "pg_main", "kind": "postgres_credential"}]


def test_postgres_pool_is_removed_and_the_note_does_not_send_to_the_worker_pool() -> None:
    doc, notes, _result = migrate("""
        workflow:
          - step: start
            tool: {kind: postgres, auth: pg, query: "select 1", pool: {max_size: 4}, input: {a: 1}}
        """)
    assert "pool" not in doc["workflow"][0]["tool"]
    note = next(n for n in notes if "pool" in n)
    assert "connection pool" in note and "removed" in note


def test_validate_on_a_postgres_pool_says_connection_pool_not_worker_pool(tmp_path: Path, capsys) -> None:
    f = tmp_path / "p.yaml"
    f.write_text(HEAD + "keychain: [{name: pg, kind: postgres_credential}]\nworkflow:\n  - step: start\n"
                 "    tool: {kind: postgres, auth: pg, query: 'select 1', pool: {max_size: 4}}\n")
    assert main(["validate", str(f)]) == 2
    out = capsys.readouterr().out
    assert "connection pool" in out and "spec.pool" not in out


def test_shell_becomes_kind_script() -> None:
    doc, notes, _ = migrate("""
        workflow:
          - step: start
            tool: {kind: shell, cmds: ["echo a", "echo b"], input: {x: 1}}
        """)
    task = doc["workflow"][0]["tool"]
    assert task["kind"] == "script" and task["script"] == "echo a\necho b" and task["args"] == {"x": 1}
    assert any("kind: script" in n for n in notes)


def test_else_without_then_and_output_in_rules() -> None:
    _doc, _, result = migrate("""
        workflow:
          - step: start
            tool:
              kind: noop
              spec:
                policy:
                  rules:
                    - when: "{{ output.status == 'error' and output.error.retryable }}"
                      then: {do: retry, attempts: 2}
                    - else:
                        do: continue
                        set: {ctx.v: "{{ output.data }}", iter.ignored: 1}
        """)
    # `iter.*` in a step without a loop has no home: refused, naming what to write instead
    assert result.refused
    assert any("iter.ignored" in str(n) and "ctx.ignored" in str(n) for n in result.untranslated)


def test_templated_set_keys_move_to_set_ctx_with_nested_and_dotted_forms() -> None:
    doc, _, result = migrate("""
        workflow:
          - step: start
            tool:
              kind: noop
              result: 1
              spec:
                policy:
                  rules:
                    - else:
                        then: {do: continue, set: {ctx: {a: 1}, step.b: 2}}
        """)
    assert not result.problems
    then = doc["workflow"][0]["tool"]["spec"]["policy"]["rules"][0]["else"]["then"]
    assert then == {"do": "continue", "set_ctx": {"a": 1, "b": 2}}


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("""
        workflow:
          - step: start
            tool: {kind: nats, subject: x, input: {a: 1}}
        """, "`kind: nats`"),
        ("""
        workflow:
          - step: start
            tool:
              kind: python
              input: {a: 1}
              script: {source: {type: gcs, path: "gs://b/x.py"}}
        """, "paste the source into `code`"),
        ("""
        workflow:
          - step: start
            tool: {kind: noop, input: {a: 1}, output: {select: [{path: "$.x", as: x}]}}
        """, "output.select"),
        ("""
        workflow:
          - step: start
            tool: {kind: postgres, auth: pg, command: "select 1; select 2", input: {a: 1}}
            next: {arcs: [{step: b}]}
          - step: b
            tool: {kind: noop, result: "{{ start.command_0.rows }}"}
        """, "statement 0"),
        ("""
        workflow:
          - step: start
            tool: {kind: http, url: "http://x", input: {page: 2}}
        """, "input `page`"),
        ("""
        workflow:
          - step: start
            loop: {in: [1, 2], iterator: n, spec: {mode: cursor}}
            tool: {kind: noop, input: {a: 1}, result: "{{ a }}"}
        """, "`cursor` mode"),
        ("""
        workflow:
          - step: start
            loop: {in: [1, 2], iterator: n, spec: {mode: parallel, max_in_flight: "{{ ctx.n }}"}}
            tool: {kind: noop, input: {a: 1}, result: "{{ a }}"}
        """, "write a number"),
        ("""
        workflow:
          - step: start
            loop: {in: [1, 2], iterator: n, spec: {mode: parallel}}
            tool: {kind: noop, input: {a: 1}}
            set: {ctx.last: "{{ n }}"}
        """, "reducers"),
    ],
)
def test_what_has_no_translation_is_refused_with_its_line_and_what_to_do(body: str, says: str) -> None:
    _, _, result = migrate(body)
    assert result.refused
    assert any(says in str(n) for n in result.untranslated), [str(n) for n in result.untranslated]
    assert all(str(n).startswith("u.yaml:") and n.line > 1 for n in result.untranslated)


def test_the_command_line_refuses_with_exit_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    f = tmp_path / "up.yaml"
    f.write_text(HEAD + "workflow:\n  - step: start\n    tool: {kind: nats, subject: x, input: {a: 1}}\n")
    out = tmp_path / "new.yaml"
    assert main(["migrate", "--from", "upstream", str(f), "-o", str(out)]) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert f"{f}:6:" in err and "kind: nats" in err and "nothing was written" in err


def test_the_command_line_report_lists_every_rewrite(tmp_path: Path, capsys) -> None:
    f = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "sets.yaml"
    out = tmp_path / "new.yaml"
    assert main(["migrate", str(f), "-o", str(out)]) == 0
    quiet = capsys.readouterr().err
    assert "rewrote" not in quiet and "--report lists them" in quiet and "upstream NoETL dialect" in quiet
    assert main(["migrate", str(f), "-o", str(out), "--report"]) == 0
    loud = capsys.readouterr().err
    assert loud.count("rewrote:") >= 5 and "arc `set`" in loud
    assert main(["validate", str(out)]) == 0


@pytest.mark.parametrize("command", ["validate", "check"])
def test_validate_and_check_name_the_dialect_in_one_line(command: str, capsys) -> None:
    f = Path(__file__).resolve().parents[2] / "fixtures" / "upstream" / "combined_basic.yaml"
    assert main([command, str(f)]) == 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "upstream NoETL's dialect" in lines[0] and "noetl migrate --from upstream" in lines[0]


def test_a_canonical_playbook_is_not_taken_for_upstream() -> None:
    text = (Path(__file__).resolve().parents[3] / "examples" / "hello.yaml").read_text()
    result = migrate_text(text, "hello.yaml")
    assert result.dialect == "drafts" and result.text == text and not result.notes
