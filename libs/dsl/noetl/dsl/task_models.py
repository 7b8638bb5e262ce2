"""The fields of each task kind, as pydantic models: one model per kind, chosen by ``kind``.

A task field that no kind reads is a silent no-op at run time (``sql:`` on a duckdb task runs
nothing, ``arg:`` on a python task passes no arguments), so validation needs to know every
kind's fields to say no before anything runs. One model per kind serves three readers that must
agree: the validator (unknown, missing and mistyped fields, ``checks_fields.py``), the JSON Schema
editors use (``document.py`` builds the task union from these models) and the generated field
reference (``kindref.py``). The worker's tools in ``services/worker/noetl/worker/tools`` are the
truth each model restates; a plug-in kind passes its own model to ``kinds.register_kind``.

A model lists a kind's own fields only: ``name``, ``kind`` and ``spec`` belong to every task.
Fields rendered at run time accept a template string wherever their value may be computed, so
``headers: "{{ workload.headers }}"`` passes while ``headers: "x"`` does not.
"""

from __future__ import annotations

import types
from typing import Annotated, Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

COMMON_FIELDS: tuple[str, ...] = ("name", "kind", "spec")
COMMON_SPEC_KNOBS: tuple[str, ...] = ("timeout", "policy")

TemplateString = Annotated[
    str,
    Field(
        pattern=r"\{\{|\{%",
        description='A Jinja2 template rendered at run time, e.g. "{{ workload.items }}".',
    ),
]
Mapping = dict[str, Any]
Sql = Annotated[str, Field(min_length=1)]


def _group_schema(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Carry ``one_of`` and ``exclusive`` into the JSON Schema, where pydantic has no words for them."""
    clauses: list[dict[str, Any]] = []
    if not getattr(model, "template_form", False):
        for group in getattr(model, "one_of", ()):
            clauses.append({"anyOf": [{"required": [name]} for name in group]})
    for group in getattr(model, "exclusive", ()):
        clauses.append({"not": {"required": list(group)}})
    if len(clauses) == 1:
        schema.update(clauses[0])
    elif clauses:
        schema["allOf"] = clauses


class KindFields(BaseModel):
    """The base of a kind's field model; a plug-in kind may use it or any pydantic model.

    ``one_of``: groups of which at least one field is required (``query`` or ``command``).
    ``exclusive``: groups of which at most one field may be given. ``spec_knobs``: the knobs the
    kind reads from its layered spec besides ``timeout`` and ``policy``. ``hints``: advice for a
    field the kind does not have but authors write anyway (``sql`` for ``query``).
    """

    # built on first use (~1 ms a kind): the checks read only their fields, and validation builds
    # the models of the kinds a playbook uses (noetl.dsl.document_variants)
    model_config = ConfigDict(extra="forbid", json_schema_extra=_group_schema, defer_build=True)

    summary: ClassVar[str] = ""
    one_of: ClassVar[tuple[tuple[str, ...], ...]] = ()
    exclusive: ClassVar[tuple[tuple[str, ...], ...]] = ()
    spec_knobs: ClassVar[tuple[str, ...]] = ()
    hints: ClassVar[dict[str, str]] = {}
    template_form: ClassVar[bool] = False  # a workbook template: required fields may come from its caller

    @model_validator(mode="after")
    def _field_groups(self) -> KindFields:
        """The same group rules the validator applies, for the document model's last check."""
        written = {info.alias or name: name for name, info in type(self).model_fields.items()}
        given = {key for key, name in written.items() if name in self.model_fields_set}
        if not self.template_form:
            for group in self.one_of:
                if not given.intersection(group):
                    raise ValueError(f"needs {' or '.join(group)}")
        for group in self.exclusive:
            if len([key for key in group if getattr(self, written[key], None) is not None]) > 1:
                raise ValueError(f"give only one of {', '.join(group)}")
        return self


class NoopFields(KindFields):
    """`kind: noop`: passes a value on; routes, sets ctx or gives a pipeline a fixed result."""

    summary: ClassVar[str] = "does nothing; its result is `result`, else `_prev` unchanged"
    hints: ClassVar[dict[str, str]] = {
        "value": "a noop task's value is its `result` field",
        "output": "a noop task's value is its `result` field",
    }

    result: Any = Field(None, description="The task's result; without it `_prev` passes on.")


class PythonFields(KindFields):
    """`kind: python`: runs trusted Python code in the worker."""

    summary: ClassVar[str] = "runs Python code in the worker (no sandbox: trusted code only)"
    hints: ClassVar[dict[str, str]] = {
        "libs": "a python task has no `libs`: import modules at the top of `code` (`import json`); "
        "third-party packages must be installed on the worker",
        "script": "a python task has no `script`: write the source in `code` (code is not loaded from "
        "files or URLs)",
        "source": "the Python source goes in `code`",
        "result": "a python task's result is what `main` returns, or the variable `result` the code sets",
    }

    code: str = Field(
        min_length=1,
        description="Python source, never rendered. Defines `main` (called as `main(**args)`, its "
        "return value is the result) or runs as a script (its variable `result` is the result).",
    )
    args: Mapping | TemplateString | None = Field(
        None,
        description="Inputs: `main`'s keyword arguments, or the script's globals "
        "(the code gets a deep copy).",
    )


class HttpFields(KindFields):
    """`kind: http`: one HTTP request; the result is `{status, headers, data}`."""

    summary: ClassVar[str] = "one HTTP request; result `{status, headers, data}`"
    exclusive: ClassVar[tuple[tuple[str, ...], ...]] = (("json", "body"),)
    hints: ClassVar[dict[str, str]] = {
        "endpoint": "the address is `url`",
        "uri": "the address is `url`",
        "payload": "send a JSON body with `json` (or `body`: a string is sent as is)",
        "data": "send a JSON body with `json` (or `body`: a string is sent as is)",
        "query": "query parameters go in `params` (a mapping)",
        "query_params": "query parameters go in `params` (a mapping)",
    }

    url: str = Field(min_length=1, description="The URL to request.")
    method: str | None = Field(None, description="The HTTP method (default GET).")
    params: Mapping | list[Any] | TemplateString | None = Field(None, description="Query parameters.")
    headers: Mapping | TemplateString | None = Field(
        None, description="Request headers; non-string values are sent as JSON or text, null ones left out."
    )
    json_: Any = Field(None, alias="json", description="A body sent as JSON.")
    body: Any = Field(None, description="A body: a string is sent as is, anything else as JSON.")
    auth: str | Mapping | None = Field(
        None,
        description="A keychain entry name, or inline credentials: `token` (Bearer), "
        "`username`/`password` (Basic), `value` (Bearer); `type: bearer|basic` picks one.",
    )


class _SqlFields(KindFields):
    one_of: ClassVar[tuple[tuple[str, ...], ...]] = (("query", "command"),)
    exclusive: ClassVar[tuple[tuple[str, ...], ...]] = (("query", "command"),)
    hints: ClassVar[dict[str, str]] = {
        "sql": "the SQL goes in `query` (or `command`, the same field)",
        "statement": "the SQL goes in `query` (or `command`, the same field)",
        "args": "statement parameters go in `params`",
    }

    query: Sql | None = Field(None, description="The SQL to run; `command` is the same field.")
    command: Sql | None = Field(None, description="The SQL to run; another name for `query`.")


class PostgresFields(_SqlFields):
    """`kind: postgres`: SQL on PostgreSQL; the result is `{rows, columns, rowcount}`."""

    summary: ClassVar[str] = "SQL on PostgreSQL; result `{rows, columns, rowcount}`"
    hints: ClassVar[dict[str, str]] = {
        **_SqlFields.hints,
        "database": "a postgres task's database is part of its credentials: the `database` field "
        "(or `dsn`) of the `auth` entry",
        "dsn": "connection details go in the `auth` entry's data (`dsn`, or `host`, `port`, `user`, "
        "`password`, `database`)",
        "table": "a postgres task runs SQL: write the statement (`INSERT INTO <table> ...`) in `command`",
        "pool": "`pool` here is a database connection pool (upstream NoETL's setting): this engine opens "
        "the connection per task run and has no pool settings, so remove it (`noetl migrate --from "
        "upstream` does); it is not the worker pool",
    }

    params: list[Any] | TemplateString | None = Field(
        None, description="Values for PostgreSQL's `$1..$n` placeholders (a list)."
    )
    auth: str | Mapping = Field(
        description="A keychain entry name, or inline credentials: `{dsn}` or "
        "`{host, port, user, password, database}`."
    )


class DuckdbFields(_SqlFields):
    """`kind: duckdb`: SQL on an in-process DuckDB; the result is `{rows, columns, rowcount}`."""

    summary: ClassVar[str] = "SQL on an in-process DuckDB; result `{rows, columns, rowcount}`"
    spec_knobs: ClassVar[tuple[str, ...]] = ("database",)
    hints: ClassVar[dict[str, str]] = {
        **_SqlFields.hints,
        "auth": "a duckdb task takes no credentials: it opens the file named by `database`",
        "file": "the database file is `database`",
        "path": "the database file is `database`",
    }

    params: Mapping | list[Any] | TemplateString | None = Field(
        None, description="A mapping for `$name` placeholders, or a list for `?` and `$1..$n`."
    )
    database: str | None = Field(
        None,
        description="A database file (or `spec.database`, layered like any knob); without one, a "
        "fresh in-memory database.",
    )


class PlaybookFields(KindFields):
    """`kind: playbook`: runs a catalog playbook as a child execution and waits for it."""

    summary: ClassVar[str] = "runs a catalog playbook as a child execution; result: the child's result"
    hints: ClassVar[dict[str, str]] = {
        "payload": "the child's request payload is `args`",
        "workload": "the child's request payload is `args` (merged over the child's `workload`)",
        "playbook": "the child is named by `path` (its `metadata.path`)",
    }

    path: str = Field(min_length=1, description="The child's `metadata.path` in the catalog.")
    version: str | int | float | None = Field(
        None, description="The child's version; without it the latest registration."
    )
    args: Mapping | TemplateString | None = Field(
        None, description="The child's request payload (merged over its `workload`)."
    )


class SecretsFields(KindFields):
    """`kind: secrets`: a keychain entry (or one field of it) as the task's result."""

    summary: ClassVar[str] = "reads a keychain entry; result: its data, or one field of it"
    hints: ClassVar[dict[str, str]] = {
        "entry": "the keychain entry is `key`",
        "secret": "the keychain entry is `key`",
        "auth": "the keychain entry is `key`",
    }

    key: str = Field(
        min_length=1,
        description="The keychain entry (declared under the playbook's `keychain`); `name` is the label.",
    )
    field: str | int | None = Field(
        None, description="One field of the entry's data; without it the whole data."
    )


class WorkbookFields(KindFields):
    """`kind: workbook`: runs a task template of `workbook.tasks`; other fields override the template's."""

    # the other fields are the template's kind's, checked against that kind's model
    model_config = ConfigDict(extra="allow")

    summary: ClassVar[str] = "runs a `workbook.tasks` template with this task's fields merged over it"
    hints: ClassVar[dict[str, str]] = {
        "template": "the template is named by `task`",
        "ref": "the template is named by `task`",
    }

    task: str = Field(min_length=1, description="The name of an entry of `workbook.tasks`.")


Argv = list[str | int | float]


class ScriptFields(KindFields):
    """`kind: script`: a command or a script run in a subprocess on the worker (SEMANTICS §22)."""

    summary: ClassVar[str] = "runs a command or script in a subprocess; result `{exit_code, stdout, stderr}`"
    one_of: ClassVar[tuple[tuple[str, ...], ...]] = (("command", "script"),)
    exclusive: ClassVar[tuple[tuple[str, ...], ...]] = (("command", "script"),)
    hints: ClassVar[dict[str, str]] = {
        "code": "a script task runs `command` (argv, or a string run by `shell`) or `script` (text run "
        "by `interpreter`)",
        "cmd": "the command is `command` (a list of argv, or a string run by `shell`)",
        "argv": "the command is `command` (a list of argv, or a string run by `shell`)",
        "run": "the command is `command` (a list of argv, or a string run by `shell`)",
        "environment": "environment variables go in `env` (a mapping)",
        "workdir": "the working directory is `cwd`",
        "dir": "the working directory is `cwd`",
    }

    command: Argv | str | None = Field(
        None,
        description="A list of argv run as is (no shell), or a string run by `shell`; rendered.",
    )
    script: str | None = Field(
        None,
        description="Script text run by `interpreter`, never rendered (pass data in `args` or `env`).",
    )
    interpreter: Argv | TemplateString | None = Field(
        None, description='What runs `script` (argv; default ["/bin/sh", "-e"]).'
    )
    shell: Argv | TemplateString | None = Field(
        None, description='What runs a string `command` (argv; default ["/bin/sh", "-c"]).'
    )
    args: Mapping | TemplateString | None = Field(
        None, description="Inputs, given as JSON on standard input and in `NOETL_ARGS`."
    )
    env: Mapping | TemplateString | None = Field(
        None, description="Environment variables added to a minimal one (PATH, HOME, LANG, LC_ALL, TZ)."
    )
    cwd: str | None = Field(None, description="The working directory; default a fresh temporary one.")


BUILTIN_MODELS: dict[str, type[KindFields]] = {
    "noop": NoopFields,
    "python": PythonFields,
    "http": HttpFields,
    "postgres": PostgresFields,
    "duckdb": DuckdbFields,
    "playbook": PlaybookFields,
    "workbook": WorkbookFields,
    "secrets": SecretsFields,
    "script": ScriptFields,
}


def _constraints(meta: list[Any]) -> tuple[bool, bool]:
    """(is a template pattern, is non-empty) from a field's constraint metadata."""
    pattern = non_empty = False
    for m in meta:
        inner = m.metadata if isinstance(m, FieldInfo) else [m]
        for c in inner:
            pattern = pattern or getattr(c, "pattern", None) is not None
            non_empty = non_empty or (getattr(c, "min_length", None) or 0) > 0
    return pattern, non_empty


def expected_types(tp: Any, meta: list[Any] | None = None) -> list[str]:
    """A field type in an author's words (`a mapping`, `a template`), for messages and the reference."""
    origin = get_origin(tp)
    if origin is Annotated:
        base, *more = get_args(tp)
        return expected_types(base, [*(meta or []), *more])
    if origin in (Union, types.UnionType):
        out: list[str] = []
        for arg in get_args(tp):
            if arg is not type(None):
                out += [e for e in expected_types(arg) if e not in out]
        return out
    if tp is str:
        pattern, non_empty = _constraints(meta or [])
        if pattern:
            return ['a template ("{{ ... }}")']
        return ["a non-empty string" if non_empty else "a string"]
    if origin is Literal:
        return ["one of " + ", ".join(repr(a) for a in get_args(tp))]
    names = {int: "a whole number", float: "a number", bool: "true or false", Any: "any value"}
    if tp in names:
        return [names[tp]]
    if tp is dict or origin is dict or (isinstance(tp, type) and issubclass(tp, BaseModel)):
        return ["a mapping"]
    if tp is list or origin is list:
        return ["a list"]
    return [getattr(tp, "__name__", str(tp))]


def type_words(tp: Any) -> str:
    """``expected_types`` as one phrase: `a mapping, a list or a template`."""
    words = expected_types(tp)
    if "a number" in words and "a whole number" in words:
        words.remove("a whole number")
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " or " + words[-1]


def field_names(model: type[BaseModel]) -> list[str]:
    """A model's fields as written in a playbook (aliases such as `json` included)."""
    return [info.alias or name for name, info in model.model_fields.items() if name not in COMMON_FIELDS]


def spec_knobs(model: type[BaseModel] | None) -> tuple[str, ...] | None:
    """The knobs a task's own `spec` may hold; None when the kind does not say (any knob passes)."""
    if model is None or not hasattr(model, "spec_knobs"):
        return None
    return (*COMMON_SPEC_KNOBS, *model.spec_knobs)
