"""The task kinds' field reference (``docs/task-kinds.md``), generated from the kinds' models.

Generated for the same reason as the JSON Schema: the page, the validator and the schema read one
contract, so the page cannot document a field the validator rejects. A test fails when the page
drifts; ``noetl schema --kinds --out docs/task-kinds.md`` regenerates it.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel

from noetl.dsl.task_models import (
    BUILTIN_MODELS,
    COMMON_FIELDS,
    COMMON_SPEC_KNOBS,
    spec_knobs,
    type_words,
)

HEADER = """\
# Task kinds: the field reference

<!-- Generated from libs/dsl/noetl/dsl/task_models.py by
     `noetl schema --kinds --out docs/task-kinds.md`: edit the models, not this page. -->

Every task has `name` (its label, unique in the pipeline), `kind` (one of the kinds below, or a
plug-in kind) and an optional `spec` (its knobs and its `policy`), plus the fields of its kind.
`noetl validate` rejects a field the kind does not have (naming the field you probably meant), a
missing required field, and a value of the wrong type. Every field except a python task's `code`
is rendered as a template before the task runs, so wherever a field takes a mapping or a list it
also takes a template that renders to one (`headers: "{{ workload.headers }}"`). What each kind
does and returns, with examples, is in [tools.md](tools.md); the task shapes and policies are in
[dsl.md](dsl.md).

A task's `spec` holds `timeout` (seconds, or `{connect: s, read: s}`; a spec is not rendered, so
no templates), `policy` (the task's rules) and the knobs its kind lists below. Knobs of other
scopes are rejected with their place: `mode`, `max_in_flight` (`loop.spec`), `exec`, `reducers`
(`loop.spec.policy`), `pool`, `max_task_runs` (the step's `spec`), `admit`, `failure`,
`lifecycle` (the step's `spec.policy`).

A `workbook.tasks` template is checked against its kind's model too, except that its required
fields may be left to the `kind: workbook` tasks that use it: those are checked on the template's
fields merged with the caller's.
"""


def _type(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    tp = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return type_words(tp)


def _required(model: type[BaseModel], key: str, name: str) -> str:
    if model.model_fields[name].is_required():
        return "yes"
    for group in getattr(model, "one_of", ()):
        if key in group:
            return "one of " + ", ".join(f"`{k}`" for k in group)
    return "no"


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def kind_section(kind: str, model: type[BaseModel]) -> str:
    """One kind's table: field, type, required, meaning; then its groups and spec knobs."""
    doc = (model.__doc__ or "").strip().split("\n")[0]
    lines = [f"## {kind}", "", doc, "", "| field | type | required | meaning |", "|---|---|---|---|"]
    for name, info in model.model_fields.items():
        if name in COMMON_FIELDS:
            continue
        key = info.alias or name
        meaning = _cell(info.description or "")
        lines.append(f"| `{key}` | {_type(model, name)} | {_required(model, key, name)} | {meaning} |")
    if kind == "workbook":
        lines.append(
            "| any field of the template's kind | as that kind's | no | Merged over the template's "
            "field: mappings merge key by key, anything else replaces. |"
        )
    notes = []
    for group in getattr(model, "exclusive", ()):
        notes.append("Give at most one of " + ", ".join(f"`{k}`" for k in group) + ".")
    knobs = spec_knobs(model) or COMMON_SPEC_KNOBS
    extra = [k for k in knobs if k not in COMMON_SPEC_KNOBS]
    if extra:
        notes.append("Its `spec` also takes " + ", ".join(f"`{k}`" for k in extra) + ".")
    if kind == "workbook":
        notes.append("Its `spec` takes the knobs of the template's kind.")
    if notes:
        lines += ["", " ".join(notes)]
    return "\n".join(lines) + "\n"


def kinds_reference() -> str:
    """The whole page, built-in kinds in the registry's order."""
    sections = [kind_section(kind, model) for kind, model in BUILTIN_MODELS.items()]
    return HEADER + "\n" + "\n".join(sections)
