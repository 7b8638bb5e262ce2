"""``noetl migrate``: the older drafts' constructs rewritten into the v10 DSL.

migrate_text(text, file) -> MigrationResult(text, notes, problems)

Handled: `case`/`when`/`then` (→ `next.arcs` and task rules), step and task `retry`, `sink`
(→ a task), step `vars` (→ `set_ctx`), step `when` (→ admission), `eval`/`expr` (→
`spec.policy.rules`), `next` as a name or a list, `spec.next_mode`, `loop.mode`, root `vars`,
`name`/`path` at the root, a step-level `type`, spec 004's http `endpoint`/`payload`, and step
fragments (wrapped in a playbook). Every construct it cannot translate is dropped from the output
and reported as a note with its line; the output is validated, and the remaining problems come
back in ``problems``. Comments stay next to the constructs they describe where those survive.

Upstream NoETL's dialect (``dialect="upstream"``, or detected: :mod:`.upstream_detect`) is
translated first by :mod:`.upstream`, construct by construct; what it cannot translate is a
refusal (``MigrationResult.refused``), which the command line turns into exit 2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from noetl.dsl.errors import Problem
from noetl.dsl.migrate.core import Migrator, Note
from noetl.dsl.migrate.emit import emit
from noetl.dsl.migrate.root import translate_document
from noetl.dsl.migrate.source import load_source
from noetl.dsl.migrate.upstream import translate_upstream
from noetl.dsl.migrate.upstream_detect import describe_signals, upstream_signals
from noetl.dsl.validate import validate_text

__all__ = ["DIALECTS", "MigrationResult", "Note", "migrate_text", "upstream_hint"]

DIALECTS = ("auto", "drafts", "upstream")


@dataclass
class MigrationResult:
    text: str | None  # None when the input could not be read as YAML
    notes: list[Note] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # what `noetl validate` says of ``text``
    dialect: str = "drafts"  # what the input was read as: the older drafts, or upstream NoETL's

    @property
    def untranslated(self) -> list[Note]:
        return [n for n in self.notes if n.untranslated]

    @property
    def refused(self) -> bool:
        """Upstream constructs left untranslated: an upstream playbook is never half-migrated."""
        return self.dialect == "upstream" and bool(self.untranslated)


def migrate_text(
    text: str, file: str = "<playbook>", *, sugar: bool = False, dialect: str = "auto"
) -> MigrationResult:
    """Canonical v10 by default; ``sugar`` writes a task `when` as a `choose` instead of the gate
    task it compiles to (SEMANTICS §21: the sugar is optional, so it is only emitted on request).
    ``dialect``: "upstream" reads the file as upstream NoETL's, "drafts" as the older drafts',
    "auto" decides by the constructs only upstream writes."""
    src = load_source(text, file)
    if src.problems:
        return MigrationResult(None, problems=src.problems)
    m = Migrator(src, file, sugar=sugar)
    upstream = dialect == "upstream" or (dialect == "auto" and bool(upstream_signals(src.data)))
    if upstream and isinstance(src.data, dict):
        translate_upstream(m, src.data)
    doc = translate_document(m, src.data)
    if doc is None:
        return MigrationResult(
            None, problems=[Problem(file, 1, "", "not a playbook, a step or a list of steps")]
        )
    out = emit(doc, src) if m.notes else text
    notes = sorted(m.notes, key=lambda n: n.line)
    problems = validate_text(out, file)
    if not problems:
        notes += _names_left(out, file)
    return MigrationResult(out, notes, problems, "upstream" if upstream else "drafts")


def upstream_hint(text: str, file: str) -> Problem | None:
    """One problem that says ``text`` is upstream NoETL's dialect and how to translate it, or
    None: `noetl validate` and `noetl check` print it instead of one error per construct."""
    src = load_source(text, file)
    signals = upstream_signals(src.data) if not src.problems else []
    if not signals:
        return None
    return Problem(
        file,
        next(
            (
                src.lines[p]
                for p in (signals[0][0][:k] for k in range(len(signals[0][0]), 0, -1))
                if p in src.lines
            ),
            1,
        ),
        "",
        f"this is upstream NoETL's dialect ({describe_signals(signals, src.lines)}): translate it "
        f"with `noetl migrate --from upstream {file} -o <new.yaml>` and validate the result",
    )


def _names_left(text: str, file: str) -> list[Note]:
    """Names the drafts had and v10 does not (`pages` from a `collect`, a loop iterator in an
    arc): `noetl check` finds them in the output, and they are reported as not translated."""
    from noetl.dsl.analysis import check_playbook
    from noetl.dsl.validate import load_playbook

    return [
        Note(file, f.line, f.path, f"{f.message} (line {f.line} of the migrated output)", untranslated=True)
        for f in check_playbook(load_playbook(text, file))
        if f.code in ("unknown-name", "name-out-of-scope") and f.severity == "error"
    ]
