"""The user-facing v10 playbook document as pydantic models.

These models are the published contract: the JSON Schema (``schema.py``) is generated from them,
and validation runs them as a last net after its own checks (which give better messages and
report every problem, so they run first). Where the DSL is closed (root, step, loop, next, arc,
rules) the models forbid unknown keys; a task is checked by its kind's model (``task_models.py``),
chosen by ``kind``, and a task of a plug-in kind stays open.
Docstrings and descriptions here become the schema's descriptions, so they speak to playbook
authors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias, Union

from pydantic import BaseModel, Discriminator, Field, Tag, create_model
from pydantic.fields import FieldInfo

from noetl.dsl.document_policy import (
    RunLimits,
    Seconds,
    StepPolicy,
    Template,
    When,
    _Closed,
    _Open,
)
from noetl.dsl.task_models import BUILTIN_MODELS


class Metadata(_Closed):
    """Identity of the playbook; `path` is how other playbooks and the catalog refer to it."""

    name: str = Field(min_length=1, description="Required name of the playbook.")
    path: str | None = Field(None, description="Catalog path, e.g. examples/demo.")
    version: str | int | float | None = Field(None, description="Version, kept as a string.")
    description: str | None = None
    tags: Any = Field(None, description="The author's own, kept as written.")
    labels: Any = Field(None, description="The author's own, kept as written.")


class KeychainEntry(_Closed):
    """A credential the playbook needs, resolved before the workflow starts; read as keychain.<name>."""

    name: str = Field(min_length=1)
    kind: str = Field(min_length=1, description="Credential kind, e.g. postgres_credential, secret.")


class Executor(_Closed):
    """Runtime defaults; `spec` is the outermost layer of every task's effective spec."""

    spec: dict[str, Any] | None = None


class TaskThen(_Closed):
    """What a matching task rule does: a directive plus optional ctx/iter patches."""

    do: Literal["continue", "retry", "jump", "break", "fail"] = Field(
        "continue",
        description="continue: next task; retry: run the task again; jump: go to the task `to`; "
        "break: end the pipeline successfully; fail: end it as failed.",
    )
    attempts: int | str | None = Field(
        None, description="retry: maximum runs including the first (default 3)."
    )
    backoff: Literal["none", "fixed", "linear", "exponential"] | None = Field(
        None, description="retry backoff."
    )
    delay: float | str | None = Field(
        None, description="retry: seconds before the first retry (default 1.0)."
    )
    max_delay: float | str | None = Field(None, description="retry: cap on the delay.")
    to: str | None = Field(None, description="jump: the label of a task in the same pipeline.")
    set_ctx: dict[str, Any] | None = Field(None, description="Patch of the execution context `ctx`.")
    set_iter: dict[str, Any] | None = Field(None, description="Patch of the loop iteration scope `iter`.")


class TaskElse(_Closed):
    then: TaskThen


class TaskRule(_Closed):
    """`{when, then}`, or the fallback `{else: {then}}` (also `{else: null, then}`); first match wins."""

    when: When | None = None
    then: TaskThen | None = None
    else_: TaskElse | None = Field(None, alias="else")


class TaskPolicy(_Closed):
    """Worker-side outcome handling: the only place control actions are allowed."""

    rules: list[TaskRule] = Field(description="Tried top to bottom; the first true `when` wins.")
    on_unmatched: Literal["continue", "fail"] = Field("continue", description="When no rule matches.")
    mode: Literal["exclusive"] = "exclusive"
    before: list[Any] | None = Field(None, max_length=0, description="Reserved; must be empty.")
    after: list[Any] | None = Field(None, max_length=0, description="Reserved; must be empty.")
    finally_: list[Any] | None = Field(
        None, alias="finally", max_length=0, description="Reserved; must be empty."
    )


class Timeout(_Closed):
    """Separate limits: `connect` (reaching the service) and `read` (the work itself)."""

    connect: Seconds | None = None
    read: Seconds | None = None


class TaskSpec(_Closed):
    """A task's own knobs, layered over the executor, step and loop specs, and its policy."""

    timeout: Seconds | Timeout | None = Field(
        None, description="Seconds, or `{connect, read}`; a spec is not rendered (no templates)."
    )
    policy: TaskPolicy | None = None


class DuckdbTaskSpec(TaskSpec):
    database: str | None = Field(None, description="The database file, unless the task gives `database`.")


class OpenTaskSpec(_Open):
    """Knobs of the kind the task runs as (a plug-in kind's, or a workbook template's kind's)."""

    policy: TaskPolicy | None = None


_TASK_NAME = "Label, unique in the pipeline (default task_<position>)."


def _template_form(fields: type[BaseModel]) -> type[BaseModel]:
    """The fields of a `workbook.tasks` template: all optional, since the caller may give them."""
    optional: dict[str, Any] = {
        name: (info.annotation, FieldInfo.merge_field_infos(info, default=None))
        for name, info in fields.model_fields.items()
        if info.is_required()
    }
    model = create_model(f"{fields.__name__}Template", __base__=fields, **optional)
    model.template_form = True  # type: ignore[attr-defined]
    return model


def _spec_model(kind: str, fields: type[BaseModel]) -> type[BaseModel]:
    knobs: tuple[str, ...] | None = getattr(fields, "spec_knobs", None)
    if knobs is None or kind == "workbook":
        return OpenTaskSpec
    if not knobs:
        return TaskSpec
    if knobs == ("database",):
        return DuckdbTaskSpec
    extra: dict[str, Any] = {knob: (Any, None) for knob in knobs}
    return create_model(f"{kind.capitalize()}TaskSpec", __base__=TaskSpec, **extra)


def task_model(kind: str, fields: type[BaseModel], template: bool = False) -> type[BaseModel]:
    """The task model of a kind: its fields plus every task's `name`, `kind` and `spec`."""
    doc = fields.__doc__ or f"A `kind: {kind}` task."
    common: dict[str, Any] = {  # built at run time (Literal[kind]): no static type to check
        "name": (str | None, Field(None, description=_TASK_NAME)),
        "kind": (Literal[kind], Field(description="The task kind.")),
        "spec": (_spec_model(kind, fields) | None, None),
    }
    return create_model(
        kind.capitalize() + ("TaskTemplate" if template else "Task"),
        __base__=_template_form(fields) if template else fields,
        __doc__=f"A `workbook.tasks` template of {doc}" if template else doc,
        **common,
    )


class PluginTask(_Open):
    """A task of a plug-in kind: its fields are the kind's own (`noetl.dsl.kinds.register_kind`)."""

    name: str | None = Field(None, description=_TASK_NAME)
    kind: str = Field(
        description="A kind added by a plug-in.",
        json_schema_extra={"not": {"enum": [*sorted(BUILTIN_MODELS)]}},
    )
    spec: OpenTaskSpec | None = None


def _tag(value: Any) -> str | None:
    """Which model checks a task: its kind's, or the plug-in one for a kind that is not built in."""
    kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
    if not isinstance(kind, str):
        return None
    return kind if kind in BUILTIN_MODELS else "plugin"


# The built-in kinds whose task models this module builds: every kind when imported by name; the
# kinds of one playbook in a copy ``noetl.dsl.document_variants`` makes (it sets this first)
SELECTED_KINDS: frozenset[str] | None = globals().get("SELECTED_KINDS")


def _union(template: bool) -> Any:
    members = [
        Annotated[task_model(kind, fields, template), Tag(kind)]
        for kind, fields in BUILTIN_MODELS.items()
        if SELECTED_KINDS is None or kind in SELECTED_KINDS
        if not (template and kind == "workbook")  # a template cannot itself be a reference
    ]
    members.append(Annotated[PluginTask, Tag("plugin")])
    return Annotated[
        Union[tuple(members)],  # noqa: UP007 - built from a list
        Discriminator(
            _tag,
            custom_error_type="task_kind",
            custom_error_message="a task needs `kind`: one of the known kinds",
        ),
    ]


# Built at import from the kinds' models, so a static checker cannot read them: to it they are Any
if TYPE_CHECKING:
    Task: TypeAlias = Any
    TaskTemplate: TypeAlias = Any
else:
    Task = _union(template=False)
    TaskTemplate = _union(template=True)

LabelledTask = Annotated[
    dict[str, "Task | Sugar"],
    Field(
        min_length=1,
        max_length=1,
        description="`- label: {kind: ...}` or `- label: {choose|while|until: ...}`: the key is the label.",
    ),
]


class ChooseBranch(_Closed):
    """A branch of `choose`: runs its `do` tasks when `when` is the first true condition."""

    when: When
    do: list[PipelineItem] = Field(description="The branch's tasks; the branch then goes to the merge point.")


class ChooseElseBody(_Closed):
    do: list[PipelineItem]


class ChooseElse(_Closed):
    """The last branch of `choose`, taken when no `when` is true."""

    else_: ChooseElseBody = Field(alias="else")


class Choose(_Closed):
    """Sugar: an if/elif/else ladder, compiled to a dispatch task, one entry per branch and a merge
    point `<name>.end` (see `noetl compile`)."""

    name: str | None = Field(
        None,
        min_length=1,
        description="Label (or the key of `- label: {...}`); tasks: <name>, <name>.0, <name>.end.",
    )
    desc: str | None = None
    choose: list[ChooseBranch | ChooseElse] = Field(min_length=1)


class While(_Closed):
    """Sugar: runs `do` again and again while the condition, tested before each round, is true."""

    name: str | None = Field(
        None,
        min_length=1,
        description="Label (or the key of `- label: {...}`); tasks: <name>, <name>.repeat, <name>.end.",
    )
    desc: str | None = None
    while_: When = Field(alias="while", description="Tested before each round.")
    do: list[PipelineItem] = Field(min_length=1)


class Until(_Closed):
    """Sugar: runs `do`, then again until the condition, tested after each round, is true."""

    name: str | None = Field(
        None,
        min_length=1,
        description="Label (or the key of `- label: {...}`); tasks: <name>, <name>.test, <name>.end.",
    )
    desc: str | None = None
    until: When = Field(description="Tested after each round (`_prev` is the round's last result).")
    do: list[PipelineItem] = Field(min_length=1)


Sugar = Choose | While | Until
PipelineItem = Annotated[Task | LabelledTask | Sugar, Field(description="A task, or choose/while/until.")]
ChooseBranch.model_rebuild()
ChooseElseBody.model_rebuild()
While.model_rebuild()
Until.model_rebuild()


class StepSpec(_Open):
    policy: StepPolicy | None = None


Reducer = Literal["sum", "min", "max", "count", "append", "extend", "merge"]


class LoopPolicy(_Closed):
    mode: Literal["sequential", "parallel"] | None = None
    max_in_flight: int | None = Field(None, ge=1)
    exec: Literal["distributed", "local"] | None = Field(
        None,
        description="distributed (default): one command per iteration; local: the whole loop runs on one "
        "worker as one command, with the same iteration events and snapshots.",
    )
    reducers: dict[str, Reducer] | None = Field(
        None,
        description="ctx key -> how iterations' `set_ctx` writes to it are combined (sum, min, max, count, "
        "append, extend, merge); a parallel loop may set_ctx only these keys.",
    )
    limits: RunLimits | None = None


class LoopSpec(_Open):
    mode: Literal["sequential", "parallel"] | None = Field(None, description="Default sequential.")
    max_in_flight: int | None = Field(None, ge=1, description="Parallel cap (default 16).")
    policy: LoopPolicy | None = None


class Loop(_Closed):
    """Runs the step's pipeline once per element of `in`, each with its own `iter` scope."""

    in_: Template | list[Any] = Field(alias="in", description="The list to iterate (usually a template).")
    iterator: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="Name of the element in `iter`.")
    spec: LoopSpec | None = None


class Arc(_Closed):
    """An edge to another step; fires when `when` is true (default) and passes `args` as the token."""

    step: str = Field(min_length=1)
    when: When | None = None
    args: dict[str, Any] | None = None
    spec: dict[str, Any] | None = None


class NextSpec(_Closed):
    mode: Literal["exclusive", "inclusive"] | None = Field(
        None, description="exclusive (default): first matching arc; inclusive: all."
    )


class Next(_Closed):
    """Server-side router evaluated on the step's terminal event."""

    spec: NextSpec | None = None
    arcs: list[Arc] = Field(min_length=1)


class Step(_Closed):
    """A Petri-net transition: admission gate, ordered pipeline, router. Needs `tool` or `next`."""

    step: str = Field(min_length=1, description="Step name; `start` is the entry point.")
    desc: str | None = None
    spec: StepSpec | None = None
    loop: Loop | None = None
    tool: Task | Sugar | list[PipelineItem] | None = Field(
        None, description="The pipeline: one task or a list."
    )
    next: Next | None = None


class Workbook(_Closed):
    """Reusable task templates, run with `kind: workbook, task: <name>`."""

    tasks: dict[str, TaskTemplate] | None = None


class PlaybookDocument(_Closed):
    """A NoETL playbook (DSL v10, apiVersion noetl.io/v2)."""

    api_version: Literal["noetl.io/v2"] = Field(alias="apiVersion")
    kind: Literal["Playbook"]
    metadata: Metadata
    keychain: list[KeychainEntry] | None = None
    executor: Executor | None = None
    workload: dict[str, Any] | None = Field(
        None, description="Input defaults, merged with the request payload."
    )
    workflow: list[Step] = Field(min_length=1)
    workbook: Workbook | None = None
