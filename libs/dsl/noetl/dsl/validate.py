"""Static validation of a playbook (SEMANTICS §2) and the way in to the normalized model.

Every check reports into one ``Report`` and none stops early, so a user fixes a file in one
round instead of one problem per run. The pydantic document models run last, only on a file the
hand-written checks found clean: they are the published schema, and this keeps the schema and
the validator from ever accepting different things without a test noticing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from noetl.dsl.checks_keychain import check_keychain_refs
from noetl.dsl.checks_root import check_document
from noetl.dsl.checks_template import check_templates
from noetl.dsl.document_variants import document_model
from noetl.dsl.errors import PlaybookInvalidError, Problem
from noetl.dsl.model import Playbook
from noetl.dsl.normalize import normalize
from noetl.dsl.report import Report
from noetl.dsl.sugar import compile_text
from noetl.dsl.yamlload import LoadedYaml
from noetl.dsl.yamlload import Path as DocPath


def _document_path(data: Any, loc: tuple[Any, ...]) -> DocPath:
    """A pydantic error location as a document path (union branch names dropped)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        in_dict = isinstance(node, dict) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            out.append(part)
            node = node[part]
    return tuple(out)


def _schema_problems(loaded: LoadedYaml, r: Report) -> None:
    try:
        document_model(loaded.data).model_validate(loaded.data)
    except ValidationError as e:
        for err in e.errors(include_url=False):
            r.add(
                _document_path(loaded.data, err["loc"]), f"does not match the playbook schema: {err['msg']}"
            )


def _check(text: str, file: str) -> tuple[LoadedYaml, list[Problem]]:
    compiled = compile_text(text, file)  # sugar (choose/while/until) becomes canonical tasks first
    loaded = LoadedYaml(None if compiled.problems else compiled.data, compiled.lines, compiled.problems)
    if loaded.problems:
        return loaded, loaded.problems
    r = Report(file, loaded.lines)
    check_document(loaded.data, r)
    check_templates(loaded.data, r)
    check_keychain_refs(loaded.data, r)
    if not r:
        _schema_problems(loaded, r)
    if compiled.origins:
        return loaded, [compiled.as_written(p) for p in r.problems()]
    return loaded, r.problems()


def validate_text(text: str, file: str = "<playbook>") -> list[Problem]:
    """Every problem of the playbook ``text`` (empty when valid); never raises for bad input."""
    return _check(text, file)[1]


def load_playbook(text: str, file: str = "<playbook>") -> Playbook:
    """The normalized playbook; raises ``PlaybookInvalidError`` carrying every problem."""
    loaded, problems = _check(text, file)
    if problems:
        raise PlaybookInvalidError(problems)
    return normalize(loaded.data, loaded.lines, source=text, file=file)


def read_text(path: str | Path) -> tuple[str | None, Problem | None]:
    """A playbook file's text, or the problem that kept it from being read."""
    name = str(path)
    try:
        return Path(path).read_text(encoding="utf-8"), None
    except FileNotFoundError:
        return None, Problem(name, 0, "", "file not found")
    except IsADirectoryError:
        return None, Problem(name, 0, "", "is a directory, not a playbook file")
    except UnicodeDecodeError as e:
        return None, Problem(name, 0, "", f"is not UTF-8 text ({e.reason} at byte {e.start})")
    except OSError as e:
        return None, Problem(name, 0, "", f"cannot be read: {e.strerror or e}")


def load_playbook_file(path: str | Path) -> Playbook:
    """``load_playbook`` on a file; an unreadable file is a ``PlaybookInvalidError`` too."""
    text, problem = read_text(path)
    if problem is not None or text is None:
        raise PlaybookInvalidError([problem] if problem else [])
    return load_playbook(text, str(path))
