"""Checks of a task's fields against its kind's model: unknown, missing, mistyped, clashing.

A field nothing reads is the quietest bug a playbook can have: the task runs, without the SQL or
the arguments its author wrote. So every field a kind does not have is an error, with the field
the author probably meant (a hint written for the common mistakes, else the closest name). A
workbook reference is checked as what it runs: the template's kind, with the template's fields
merged under the caller's, the way the worker merges them.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from noetl.dsl import legacy
from noetl.dsl.kinds import kind_model
from noetl.dsl.report import Report, describe, type_name
from noetl.dsl.specmerge import deep_merge
from noetl.dsl.task_models import COMMON_FIELDS, field_names, type_words
from noetl.dsl.yamlload import Path

SET_HINT = (
    "write state with `set_ctx` (execution) or `set_iter` (iteration) in the `then` of a rule of "
    "`spec.policy.rules`"
)

# advice for fields written on a task of any kind that does not have them
COMMON_HINTS: dict[str, str] = {
    "timeout": "`timeout` is a knob: write it as `spec.timeout` (seconds, or `{connect: s, read: s}`)",
    "pool": "the worker pool is chosen for a whole step run: set it in the step's `spec.pool`",
    "max_task_runs": "`max_task_runs` bounds a whole pipeline run: set it in the step's `spec.max_task_runs`",
    "mode": "`mode` is a loop knob: set it in the step's `loop.spec.mode`",
    "max_in_flight": "`max_in_flight` is a loop knob: set it in the step's `loop.spec.max_in_flight`",
    "policy": "a task's policy goes under `spec`: `spec: {policy: {rules: [...]}}`",
    "rules": "a task's rules go in `spec.policy.rules`",
    "set": SET_HINT,
    "set_ctx": f"`set_ctx` goes in the `then` of a rule: {SET_HINT}",
    "set_iter": f"`set_iter` goes in the `then` of a rule: {SET_HINT}",
    "loop": "a loop belongs to the step: write `loop: {in: ..., iterator: ...}` beside the step's `tool`",
    "next": "routing belongs to the step: write the step's `next: {arcs: [...]}`",
    "desc": "a task has no description field: use a YAML comment (`# ...`), or the step's `desc`",
    "description": "a task has no description field: use a YAML comment (`# ...`), or the step's `desc`",
    "type": "the tool of a task is named by `kind`",
    "tool": "a task's tool is named by `kind`",
    "label": "a task's label is `name`",
    "id": "a task's label is `name`",
    "output": "a task's result is read by the later tasks of its pipeline as `{{ <label> }}`; keep it "
    "with `set_ctx` in a rule's `then`",
    "outputs": "a task's result is read by the later tasks of its pipeline as `{{ <label> }}`; keep it "
    "with `set_ctx` in a rule's `then`",
    "code": "only a `kind: python` task runs code",
    "result": "only a `kind: noop` task has a `result` field: add a noop task that returns the value",
}

# inputs written under names the kinds never read, per what the kind does have instead
_INPUT_NAMES = ("input", "inputs", "with", "arguments", "arg", "kwargs", "parameters")
_CREDENTIAL_NAMES = ("credential", "credentials", "connection", "keychain", "secret", "auth")


def _input_hint(key: str, fields: list[str]) -> str | None:
    if key not in _INPUT_NAMES:
        return None
    if "args" in fields:
        return "inputs go in `args` (a mapping)"
    if "json" in fields:
        return "send data as `json` or `body`, query parameters as `params`"
    if "params" in fields:
        return "statement parameters go in `params`"
    return "this kind takes no inputs: render the values into its fields with templates"


def _credential_hint(key: str, kind: str, fields: list[str]) -> str | None:
    if key not in _CREDENTIAL_NAMES:
        return None
    if "auth" in fields:
        return "credentials are given by `auth` (a keychain entry name, or an inline mapping)"
    return (
        f"a `kind: {kind}` task reads no credentials: use a keychain value in a template "
        "(`{{ keychain.<name>.<field> }}`)"
    )


def _hint(key: str, kind: str, model: type[BaseModel], fields: list[str]) -> str:
    hint = getattr(model, "hints", {}).get(key)
    hint = hint or _input_hint(key, fields) or _credential_hint(key, kind, fields) or COMMON_HINTS.get(key)
    if hint is None:
        close = difflib.get_close_matches(key, [*fields, *COMMON_FIELDS], n=1)
        hint = f"did you mean `{close[0]}`?" if close else "remove it, or use one of the kind's fields"
    return hint


def _meant(key: str, kind: str, model: type[BaseModel], fields: list[str]) -> set[str]:
    """The fields the advice for ``key`` points to (`sql` → query): their absence is the same mistake."""
    hint = _hint(key, kind, model, fields)
    return {name for name in fields if f"`{name}`" in hint}


def _advice(key: str, kind: str, model: type[BaseModel], fields: list[str]) -> str:
    have = ", ".join(fields) or "none"
    return (
        f"{_hint(key, kind, model, fields)} (`kind: {kind}` fields: {have}; every task has: name, kind, spec)"
    )


def unknown_field(
    key: str, kind: str, model: type[BaseModel], fields: list[str] | None = None, what: str = ""
) -> str:
    """The message for a field ``kind`` does not have; ``fields`` overrides the fields listed."""
    fields = field_names(model) if fields is None else fields
    what = what or f"a `kind: {kind}` task"
    return f"unknown field `{key}` in {what}: {_advice(key, kind, model, fields)}"


# ---- types -----------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def _adapter(model: type[BaseModel], name: str) -> tuple[TypeAdapter[Any], str]:
    info = model.model_fields[name]
    tp: Any = Annotated[info.annotation, *info.metadata] if info.metadata else info.annotation
    return TypeAdapter(tp), type_words(tp)


def _check_type(
    model: type[BaseModel], name: str, key: str, value: Any, kind: str, path: Path, r: Report
) -> None:
    adapter, expects = _adapter(model, name)
    try:
        adapter.validate_python(value)
    except ValidationError as e:
        found = describe(value) if value is None or isinstance(value, str | int | float) else type_name(value)
        errors = e.errors()
        detail = f" ({errors[0]['msg']})" if len(errors) == 1 and errors[0]["loc"] != () else ""
        r.add(path, f"`{key}` of a `kind: {kind}` task must be {expects}, found {found}{detail}")


# ---- the task --------------------------------------------------------------------------------


def _keys(model: type[BaseModel]) -> dict[str, str]:
    """Field as written → attribute name."""
    return {
        info.alias or name: name for name, info in model.model_fields.items() if name not in COMMON_FIELDS
    }


def _open(model: type[BaseModel]) -> bool:
    return model.model_config.get("extra") == "allow"


def _check_own(
    body: dict[str, Any],
    path: Path,
    kind: str,
    model: type[BaseModel],
    r: Report,
    *,
    skip: tuple[str, ...] = (),
    listed: list[str] | None = None,
    what: str = "",
) -> set[str]:
    """Unknown and mistyped fields of ``body`` (``skip``: fields another check owns).

    Returns the fields the unknown ones were meant to be: a task with `sql` and no `query` has
    one mistake, reported once (at `sql`), not twice.
    """
    keys = _keys(model)
    meant: set[str] = set()
    for key, value in body.items():
        if key in COMMON_FIELDS or key in legacy.TASK_KEYS or key in skip:
            continue
        if key in keys:
            _check_type(model, keys[key], key, value, kind, (*path, key), r)
        elif not _open(model):
            r.add((*path, key), unknown_field(key, kind, model, listed, what))
            meant |= _meant(key, kind, model, field_names(model))
    return meant


def _description(model: type[BaseModel], key: str) -> str:
    """The first sentence of a field's description, to say what a missing field is for."""
    info = model.model_fields[_keys(model)[key]]
    text = (info.description or "").split(". ")[0].rstrip(".")
    return f": {text[0].lower()}{text[1:]}" if text else ""


def _check_groups(
    fields: dict[str, Any],
    path: Path,
    kind: str,
    model: type[BaseModel],
    r: Report,
    *,
    required: bool,
    meant: set[str] | None = None,
    where: str = "",
    template: str = "",
) -> None:
    """Required fields (when ``required``) and exclusive field groups of the fields a task runs with.

    A missing field is reported at its would-be path (the task's line), as the other checks do.
    """
    also = f", here or in `workbook.tasks.{template}`" if template else ""
    if required:
        present = set(fields) | (meant or set())
        for key, attr in _keys(model).items():
            if model.model_fields[attr].is_required() and key not in present:
                r.add((*path, key), f"{where}needs `{key}`{_description(model, key)}: add it{also}")
        for group in getattr(model, "one_of", ()):
            if not present.intersection(group):
                names = " or ".join(f"`{key}`" for key in group)
                r.add(
                    (*path, group[0]), f"{where}needs {names}{_description(model, group[0])}: add one{also}"
                )
    for group in getattr(model, "exclusive", ()):
        given = [key for key in group if fields.get(key) is not None]
        if len(given) > 1:
            names = " and ".join(f"`{key}`" for key in given)
            r.add(path, f"{where}has both {names}: give only one of them{also}")


def check_fields(
    body: dict[str, Any], path: Path, workbook: dict[str, Any], r: Report, *, template: bool = False
) -> None:
    """Check a task's fields against its kind's model (nothing to check for a kind without one).

    ``template``: a `workbook.tasks` entry, whose required fields may come from the tasks that
    use it (they are checked there, on the merged fields).
    """
    kind = body.get("kind")
    model = kind_model(kind)
    if model is None or not isinstance(kind, str):
        return
    if kind == "workbook":
        if not template:  # a template that is itself `kind: workbook` is reported by check_task
            _check_workbook_ref(body, path, workbook, r)
        return
    meant = _check_own(body, path, kind, model, r)
    if not _open(model):
        fields = {k: v for k, v in body.items() if k not in COMMON_FIELDS}
        where = f"a `kind: {kind}` task "
        _check_groups(fields, path, kind, model, r, required=not template, meant=meant, where=where)


def template_of(body: dict[str, Any], workbook: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The name and body of the template a `kind: workbook` task runs, when it is usable."""
    name = body.get("task")
    template = workbook.get(name) if isinstance(name, str) else None
    if not isinstance(template, dict) or not isinstance(template.get("kind"), str):
        return None
    return name, template  # type: ignore[return-value]


def _check_workbook_ref(body: dict[str, Any], path: Path, workbook: dict[str, Any], r: Report) -> None:
    found = template_of(body, workbook)
    if found is None:  # a missing or unknown template is reported by check_task
        return
    name, template = found
    kind = template["kind"]
    model = kind_model(kind)
    if model is None or kind == "workbook":
        return
    listed = ["task", *field_names(model)]
    what = f"a `kind: workbook` task (its template `{name}` is `kind: {kind}`)"
    meant = _check_own(body, path, kind, model, r, skip=("task",), listed=listed, what=what)
    if _open(model):
        return
    own = {k: v for k, v in body.items() if k not in (*COMMON_FIELDS, "task")}
    inherited = {k: v for k, v in template.items() if k not in COMMON_FIELDS}
    keys, fields = _keys(model), field_names(model)
    for key in inherited:  # the template's own unknown fields are reported at the template
        if key not in keys:
            meant |= _meant(key, kind, model, fields)
    merged = deep_merge(inherited, own)
    _check_groups(merged, path, kind, model, r, required=True, meant=meant, where=f"{what} ", template=name)
