"""A step's policy in the playbook document (``noetl.dsl.document``): admission rules, failure
mode, lifecycle (timeouts, deadlines, `await` of a signal) and run limits, as pydantic models whose
descriptions become the JSON Schema's."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Template = Annotated[str, Field(description='A Jinja2 template, e.g. "{{ workload.api_url }}".')]


When = Annotated[
    str | bool,
    Field(
        description="A condition: a template that is true when its value is truthy (or a literal true/false)."
    ),
]


Seconds = Annotated[float, Field(gt=0)]


class _Closed(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class AdmitThen(_Closed):
    allow: bool


class AdmitElse(_Closed):
    then: AdmitThen


class AdmitRule(_Closed):
    when: When | None = None
    then: AdmitThen | None = None
    else_: AdmitElse | None = Field(None, alias="else")


class AdmitPolicy(_Closed):
    """Server-side gate evaluated each time a token reaches the step; no match and no else: allow."""

    mode: Literal["exclusive", "inclusive"] | None = None
    rules: list[AdmitRule]


class FailurePolicy(_Closed):
    mode: Literal["fail_fast", "best_effort"] = "fail_fast"


class AwaitBy(_Closed):
    """The principals that may answer an awaited signal: any of ``roles`` and acting in any of
    ``namespaces`` (either left out: any)."""

    roles: list[Literal["admin", "operator", "viewer"]] | None = None
    namespaces: list[str] | None = None


class Await(_Closed):
    """Wait at the step for a signal sent to this execution (`noetl signal ID NAME`); the step then
    runs with `args.signal` holding its data."""

    signal: str = Field(pattern=r"^[A-Za-z0-9_-]{1,64}$", description="The signal's name.")
    timeout_s: Seconds | None = Field(
        None, description="Fail the step with signal_timeout when no signal came within this many seconds."
    )
    by: AwaitBy | None = Field(None, description="Who may send the signal (docs/security.md#principals).")


class Lifecycle(_Closed):
    """Time limits counted by the server, and an awaited signal."""

    timeout_s: Seconds | None = Field(
        None, description="Fail the step run (step_timeout) when not ended this long after it was scheduled."
    )
    deadline_s: Seconds | None = Field(
        None,
        description="Fail the step run (step_timeout) when not ended this long after the workflow started.",
    )
    await_: Await | None = Field(None, alias="await")


class RunLimits(_Closed):
    """Limits of one step run, layered executor → step → loop; the execution-wide ones are set in
    `executor.spec.policy.limits` only."""

    max_payload_bytes: int | None = Field(None, ge=1, description="Results larger go by reference.")


class StepPolicy(_Closed):
    """Step-scope policy: admission and lifecycle hints, never control actions."""

    admit: AdmitPolicy | None = None
    failure: FailurePolicy | None = None
    lifecycle: Lifecycle | None = None
    limits: RunLimits | None = None
