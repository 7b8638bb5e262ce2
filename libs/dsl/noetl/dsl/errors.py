"""One error tree for the whole engine, with stable ``kind`` strings.

The same ``kind`` appears in task outcomes (``outcome.error.kind``), in events
(``event.error.kind``), in the ``--json`` output and in messages, so users can route on it
(``when: "{{ event.error.kind == 'retries_exhausted' }}"``) and it never changes meaning.

    NoetlError                      kind
    ├── PlaybookInvalidError        playbook_invalid      (validation; carries every Problem)
    ├── TemplateError               template_error
    │   └── TemplateLimitError      template_limit        (a render over budget, reported as template_error)
    ├── PolicyFailError             policy_fail
    ├── RetriesExhaustedError       retries_exhausted
    ├── TaskRunLimitError           task_run_limit
    ├── LoopInNotListError          loop_in_not_list
    ├── KeychainUnresolvedError     keychain_unresolved
    ├── KeychainKindMismatchError   keychain_kind_mismatch (a declared kind that is not the stored one)
    ├── ToolError                   tool_error            (generic failure of a tool kind)
    │   ├── HttpError               http_error
    │   ├── TimeoutError_           timeout
    │   ├── PostgresError           postgres_error
    │   ├── DuckdbError             duckdb_error
    │   ├── PythonError             python_error
    │   ├── ScriptError             script_error          (a `kind: script` process exited non-zero)
    │   ├── ScriptNotAllowedError   script_not_allowed    (NOETL_ALLOW_SCRIPT=false on the worker)
    │   └── ChildExecutionError     child_failed
    ├── PayloadTooLargeError        payload_too_large     (a command or event over JetStream's limit)
    │   └── BodyTooLargeError       body_too_large        (API: a request body over its limit, 413)
    ├── ResultStoreError            result_store_error
    ├── WorkerLostError             worker_lost
    ├── UnavailableError            unavailable           (API: NATS unreachable, try again)
    ├── RequestInvalidError         request_invalid
    ├── ExecutionCancelledError     cancelled             (the execution was cancelled by request)
    ├── StepTimeoutError            step_timeout          (a step run past lifecycle.timeout_s/deadline_s)
    ├── ExecutionTimeoutError       execution_timeout     (an execution past defaults.timeouts.execution_s)
    ├── SignalTimeoutError          signal_timeout        (no signal within lifecycle.await.timeout_s)
    ├── ExecutionFinishedError      execution_finished    (API: a signal/pause for a finished execution)
    ├── AbortedError                aborted               (a loop stopped by a failure elsewhere)
    ├── IterationFailedError        iteration_failed      (a failed iteration that said nothing)
    ├── ReducerTypeError            reducer_type          (a set_ctx value a loop's reducer cannot combine)
    ├── StepFailedError             step_failed           (a failed step that said nothing)
    ├── NoSuchEntityError           not_found             (API: no such execution, credential, playbook)
    ├── UnauthorizedError           unauthorized          (API: no valid token)
    ├── ForbiddenError              forbidden             (API: the token's role may not do this)
    ├── WireError                   wire_invalid          (a message that is not an event or command we read)
    ├── ResultNotJsonError          result_not_json       (a task's value with no JSON form)
    ├── NatsUnreachableError        nats_unreachable      (CLI: no NATS at the URL for these credentials)
    ├── NatsUnsuitableError         nats_unsuitable       (CLI: a NATS too old, or without JetStream)
    └── BusError                    bus_error             (the bus port's transport failures, below)
        ├── BusUnavailableError     bus_unavailable       (not now: wait it out, same ids)
        ├── NoStreamError           no_stream
        ├── BusRefusedError         bus_refused           (never storable as it is)
        ├── ReaderLostError         reader_lost
        ├── KeyExistsError          key_exists
        ├── RevisionMismatchError   revision_mismatch
        └── PullRefusedError        pull_refused

The bus family is the port's (``noetl.events.port``): the NATS adapter translates nats-py's errors
into it, and the in-memory twin raises it as NATS would. A bus error inside a task is the task's
failure like any other; outside one (storing a decision, acking, reading a credential) the caller
waits it out (``noetl.events.retry``) rather than reporting it.

One exception stands outside ``Exception`` on purpose: the python tool's ``TaskTimedOutError``
(``BaseException``), raised into a task's thread at its time limit, so that the task's own
``except Exception`` cannot swallow it, as ``asyncio.CancelledError`` is for a cancelled task.

Third-party exceptions are translated into this tree only at the boundary (the tool kinds and the
adapters), never deep inside the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class NoetlError(Exception):
    """Base of every error the engine reports to a user."""

    kind: str = "error"
    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable
        self.details = details

    def to_dict(self) -> dict[str, Any]:
        """The wire form used in outcomes and events: ``{kind, message, retryable, ...}``."""
        out: dict[str, Any] = {"kind": self.kind, "message": self.message, "retryable": self.retryable}
        out.update(self.details)
        return out


@dataclass(frozen=True)
class Problem:
    """One validation problem: where it is and what to do about it."""

    file: str
    line: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.path or '<root>'}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "path": self.path, "message": self.message}


class PlaybookInvalidError(NoetlError):
    kind = "playbook_invalid"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        text = "; ".join(str(p) for p in self.problems[:5])
        more = f" (+{len(self.problems) - 5} more)" if len(self.problems) > 5 else ""
        super().__init__(f"playbook is invalid: {text}{more}", problems=[p.to_dict() for p in self.problems])


class TemplateError(NoetlError):
    kind = "template_error"


class PolicyFailError(NoetlError):
    kind = "policy_fail"


class RetriesExhaustedError(NoetlError):
    kind = "retries_exhausted"


class TaskRunLimitError(NoetlError):
    kind = "task_run_limit"


class StepRunLimitError(NoetlError):
    kind = "step_run_limit"


class LoopSizeLimitError(NoetlError):
    kind = "loop_size_limit"


class EventBytesLimitError(NoetlError):
    kind = "event_bytes_limit"


class LoopInNotListError(NoetlError):
    kind = "loop_in_not_list"


class KeychainUnresolvedError(NoetlError):
    kind = "keychain_unresolved"


class KeychainKindMismatchError(NoetlError):
    """A keychain entry is declared with one kind and stored with another: the declared kind says
    what of it is secret and how it is read, so the execution refuses to start on a guess."""

    kind = "keychain_kind_mismatch"


class CredentialScopeError(NoetlError):
    """A playbook declares a keychain entry whose scope does not include it."""

    kind = "credential_out_of_scope"


class TemplateLimitError(TemplateError):
    """A template tried to build too much or to work too long: the renderer reports it as a
    ``template_error`` naming the limit (``noetl.dsl.template_limits``)."""

    kind = "template_limit"


class ToolError(NoetlError):
    kind = "tool_error"


class HttpError(ToolError):
    kind = "http_error"


class TimeoutError_(ToolError):  # trailing underscore: do not shadow the builtin
    kind = "timeout"
    retryable = True


class PostgresError(ToolError):
    kind = "postgres_error"


class DuckdbError(ToolError):
    kind = "duckdb_error"


class PythonError(ToolError):
    kind = "python_error"


class ScriptError(ToolError):
    """A ``kind: script`` process exited with a non-zero code (SEMANTICS §22)."""

    kind = "script_error"


class ScriptNotAllowedError(ToolError):
    """The worker's pool does not run scripts (``NOETL_ALLOW_SCRIPT=false``)."""

    kind = "script_not_allowed"


class ChildExecutionError(ToolError):
    kind = "child_failed"


class PayloadTooLargeError(NoetlError):
    kind = "payload_too_large"


class BodyTooLargeError(PayloadTooLargeError, ValueError):
    """An API request body over its limit, refused before it is all in memory (a 413)."""

    kind = "body_too_large"


class ResultStoreError(NoetlError):
    kind = "result_store_error"


class WorkerLostError(NoetlError):
    kind = "worker_lost"


class DecisionUnstorableError(NoetlError):
    """JetStream refused a server decision for good (a message over max_payload, a bad subject)."""

    kind = "decision_unstorable"


class DeploymentError(NoetlError):
    """A process cannot start against this NATS deployment as configured (a replica count JetStream
    refuses, a partition count other than the one the event log was set up with). Raised at start,
    never inside an execution."""

    kind = "deployment_invalid"


class UnavailableError(NoetlError):
    """The service cannot work right now (NATS unreachable): try again when ``/ready`` says 200."""

    kind = "unavailable"
    retryable = True


class RequestInvalidError(NoetlError):
    kind = "request_invalid"


class ExecutionCancelledError(NoetlError):
    kind = "cancelled"


class StepTimeoutError(NoetlError):
    """A step run not ended within ``lifecycle.timeout_s`` (from ``step.scheduled``) or
    ``deadline_s`` (from ``workflow.started``), SEMANTICS §16."""

    kind = "step_timeout"


class ExecutionTimeoutError(NoetlError):
    """An execution not finished ``executor.spec.policy.defaults.timeouts.execution_s`` seconds
    after ``workflow.started``."""

    kind = "execution_timeout"


class SignalTimeoutError(NoetlError):
    """A step awaiting a signal (``lifecycle.await``) that did not arrive within its ``timeout_s``."""

    kind = "signal_timeout"


class ExecutionFinishedError(NoetlError):
    """API: a signal, pause or resume for an execution that has already finished."""

    kind = "execution_finished"


class AbortedError(NoetlError):
    kind = "aborted"


class IterationFailedError(NoetlError):
    kind = "iteration_failed"


class ReducerTypeError(NoetlError):
    """A loop iteration's `set_ctx` value (or ctx's current value) does not fit the key's reducer."""

    kind = "reducer_type"


class StepFailedError(NoetlError):
    kind = "step_failed"


class NoSuchEntityError(NoetlError):
    kind = "not_found"


class UnauthorizedError(NoetlError):
    kind = "unauthorized"


class ForbiddenError(NoetlError):
    kind = "forbidden"


class CatalogConflictError(NoetlError):
    """A catalog write that would replace what is there: a version once written keeps its text,
    and a path is stored under a key no other path maps to."""

    kind = "catalog_conflict"


class RerunRefusedError(NoetlError):
    """A rerun (issue 31) that cannot fork the execution as asked: it still runs, the step never
    ran there, nothing failed and no ``--from`` says where to start, or the new playbook lacks the
    step."""

    kind = "rerun_refused"


class SignalNotAwaitedError(NoetlError):
    """A signal for a name no step of the execution waits for or can still wait for: a typo would
    otherwise be queued silently and never taken."""

    kind = "signal_not_awaited"


class ResultNotJsonError(NoetlError, TypeError):
    """A value a task returned that has no JSON form; ``path`` says where it sits."""

    kind = "result_not_json"

    def __init__(self, path: str, value: Any) -> None:
        super().__init__(f"{type(value).__name__} at {path}")
        self.path = path


class NatsUnreachableError(NoetlError):
    """The CLI found no NATS at the URL, or not one that takes these credentials."""

    kind = "nats_unreachable"


class NatsUnsuitableError(NoetlError):
    """The CLI reached a NATS it cannot work with (too old, or without JetStream)."""

    kind = "nats_unsuitable"


def reply_error(err: NoetlError) -> dict[str, Any]:
    """The ``{"error": {kind, message}}`` body of an API or NATS-service refusal."""
    return {"error": {"kind": err.kind, "message": err.message, **err.details}}


def brief(error: dict[str, Any] | None) -> dict[str, Any] | None:
    """An error's kind and message alone, for listings that must stay small."""
    if not error:
        return None
    return {"kind": error.get("kind"), "message": error.get("message")}


def all_error_kinds() -> dict[str, type[NoetlError]]:
    """Every concrete kind in the tree; a test pins that kinds are unique and documented."""
    out: dict[str, type[NoetlError]] = {}
    stack: list[type[NoetlError]] = [NoetlError]
    while stack:
        cls = stack.pop()
        out.setdefault(cls.kind, cls)
        stack.extend(cls.__subclasses__())
    return out


# the transport's branch of the tree, in a module of its own (imported here, so every class of the
# tree exists once this module is imported: ``all_error_kinds`` walks the subclasses)
from noetl.dsl.errors_bus import BusError as BusError  # noqa: E402
from noetl.dsl.errors_bus import BusRefusedError as BusRefusedError  # noqa: E402
from noetl.dsl.errors_bus import BusUnavailableError as BusUnavailableError  # noqa: E402
from noetl.dsl.errors_bus import KeyExistsError as KeyExistsError  # noqa: E402
from noetl.dsl.errors_bus import NoStreamError as NoStreamError  # noqa: E402
from noetl.dsl.errors_bus import PullRefusedError as PullRefusedError  # noqa: E402
from noetl.dsl.errors_bus import ReaderLostError as ReaderLostError  # noqa: E402
from noetl.dsl.errors_bus import RevisionMismatchError as RevisionMismatchError  # noqa: E402
from noetl.dsl.errors_bus import WireError as WireError  # noqa: E402
