"""`noetl validate` and `noetl schema`.

The output format (`file:line: path: message`, one problem a line, exit 2) is what editors and CI
annotators parse (the gcc/ruff convention), and what the conformance runner reads.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from noetl.dsl.errors import Problem
from noetl.dsl.schema import schema_text, write_schema
from noetl.dsl.validate import read_text, validate_text

EXIT_VALID = 0
EXIT_INVALID = 2


def _problems_of(file: str) -> list[Problem]:
    text, problem = read_text(file)
    if problem is not None or text is None:
        return [problem] if problem else []
    problems = validate_text(text, file)
    if problems:
        from noetl.dsl.migrate import upstream_hint

        hint = upstream_hint(text, file)  # one line instead of one error per upstream construct
        if hint is not None:
            return [hint]
    return problems


def cmd_validate(files: list[str], as_json: bool = False) -> int:
    """Validate every file; print all problems; 0 when all are valid, 2 otherwise."""
    problems: list[Problem] = []
    for file in files:
        found = _problems_of(file)
        problems.extend(found)
        if not as_json:
            for p in found:
                print(p)
            if not found:
                print(f"{file}: valid")
    if as_json:
        print(json.dumps([p.to_dict() for p in problems], indent=2))
    return EXIT_INVALID if problems else EXIT_VALID


def cmd_schema(out: str | None, kinds: bool = False) -> int:
    """Print the playbook JSON Schema (or, with ``kinds``, the task kinds' field reference), or
    write it to ``out``."""
    if kinds:
        from noetl.dsl.kindref import kinds_reference

        text = kinds_reference()
        if out is None:
            sys.stdout.write(text)
        else:
            Path(out).write_text(text, encoding="utf-8")
    elif out is None:
        sys.stdout.write(schema_text())
    else:
        write_schema(out)
    if out is not None:
        print(f"wrote {out}", file=sys.stderr)
    return 0
