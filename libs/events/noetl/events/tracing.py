"""OpenTelemetry traces of executions, linked across processes by the ids events already carry.

Why derived ids and not only propagated context: the server that records a request, the replica
that decides an event, the worker that runs a command and the server that sees the execution
finish are different processes, and the events and commands between them already name the
execution, its trace (``trace_id``, the execution id unless the request gave one), the event and
the command. Each span's id is derived from those (``span_int``), so any process can name the
parent of the span it opens without a message header, and one execution's spans form one tree:

    execution <path>                  root; server, when workflow.finished is decided
    ├── request                       server, recording the request
    ├── decide <event name>           server, one per input event decided
    │   └── command <step>            worker (parent: the command's ``traceparent``)
    │       └── task <name>           worker, one per task run
    │           └── tool <kind>       worker, the kind's run
    ...

A request whose ``trace_id`` is a W3C trace id (32 hex digits) joins the caller's trace. A
command carries the W3C ``traceparent`` of the decision that scheduled it, only when tracing is
on. The root span is exported when the execution finishes, with its start (``workflow.started``):
until then its children point at a parent the backend has not seen yet.

Off (the default) nothing is imported beyond this module and every hook is one ``enabled()``
check. On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``..._TRACES_ENDPOINT``) is set and
``OTEL_TRACES_EXPORTER`` is not ``none``: spans go over OTLP/HTTP, configured by the standard
``OTEL_*`` variables (``noetl-jetstream[otlp]`` installs the SDK and exporter). Tests use
``configure(exporter)``. The tracer provider is NoETL's own, never the global one, so a program
embedding NoETL keeps its own tracing.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import os
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

log = logging.getLogger("noetl.tracing")

_tracer: Any = None
_provider: Any = None
_forced: contextvars.ContextVar[tuple[int | None, int | None]] = contextvars.ContextVar(
    "noetl_forced_ids", default=(None, None)
)
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


def enabled() -> bool:
    return _tracer is not None


def trace_int(trace: str) -> int:
    """The 128-bit trace id of an execution's trace: a W3C trace id as given, else derived."""
    if _HEX32.match(trace) and int(trace, 16):
        return int(trace, 16)
    return int.from_bytes(hashlib.sha256(trace.encode()).digest()[:16], "big") or 1


def span_int(trace: str, *parts: object) -> int:
    """The 64-bit id of the span ``parts`` names in ``trace`` (``"decide", event_id``)."""
    text = "\x1f".join([trace, *map(str, parts)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") or 1


def root_span(trace: str, execution_id: str) -> int:
    return span_int(trace, "execution", execution_id)


def traceparent(trace: str, span_id: int) -> str:
    return f"00-{trace_int(trace):032x}-{span_id:016x}-01"


def _ids_generator() -> Any:
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class DerivedIds(RandomIdGenerator):
        """Random ids, unless a span is opened with ids derived from the execution's."""

        def generate_span_id(self) -> int:
            forced = _forced.get()[1]
            return forced if forced is not None else super().generate_span_id()

        def generate_trace_id(self) -> int:
            forced = _forced.get()[0]
            return forced if forced is not None else super().generate_trace_id()

    return DerivedIds()


def configure(exporter: Any = None, service_name: str = "noetl", *, batch: bool = True) -> None:
    """Turn tracing on with ``exporter`` (an SDK ``SpanExporter``; default OTLP over HTTP).
    ``batch=False``: export each span as it ends (tests)."""
    global _tracer, _provider
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter()
    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({"service.name": name}), id_generator=_ids_generator())
    provider.add_span_processor(BatchSpanProcessor(exporter) if batch else SimpleSpanProcessor(exporter))
    shutdown()
    _provider, _tracer = provider, provider.get_tracer("noetl")


def configure_from_env(service_name: str) -> bool:
    """On when the standard OTLP endpoint variables say so; a missing SDK is said once, not fatal."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if os.environ.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() in ("none", ""):
        return False
    if not (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        return False
    try:
        configure(service_name=service_name)
    except ImportError:
        log.warning(
            "OTEL_EXPORTER_OTLP_ENDPOINT is set but the OpenTelemetry SDK is missing: "
            "pip install 'noetl-jetstream[otlp]'; no traces are exported"
        )
        return False
    log.info("exporting traces over OTLP as %s", os.environ.get("OTEL_SERVICE_NAME") or service_name)
    return True


def shutdown() -> None:
    """Flush and stop (the process ends, or a test is done)."""
    global _tracer, _provider
    provider, _provider, _tracer = _provider, None, None
    if provider is not None:
        with contextlib.suppress(Exception):
            provider.shutdown()


def _parent_context(trace: str, parent: int | str | None) -> Any:
    """An OTel context whose current span is the (remote) parent: a span id in ``trace``, or a
    W3C ``traceparent``; None: the current context (a parent in this process, if any)."""
    from opentelemetry import trace as ot
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    if parent is None:
        return None
    if isinstance(parent, str):
        m = _TRACEPARENT.match(parent)
        if m is None:
            return None
        trace_id, span_id = int(m.group(1), 16), int(m.group(2), 16)
    else:
        trace_id, span_id = trace_int(trace), parent
    ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    return ot.set_span_in_context(NonRecordingSpan(ctx))


def _ns(timestamp: str | None) -> int | None:
    if not timestamp:
        return None
    try:
        return int(datetime.fromisoformat(timestamp).timestamp() * 1e9)
    except ValueError:
        return None


@contextlib.contextmanager
def span(
    name: str,
    trace: str,
    *,
    parent: int | str | None = None,
    span_id: int | None = None,
    attributes: dict[str, Any] | None = None,
) -> Iterator[Any]:
    """A span current for the block (children opened inside nest under it); nothing when off.
    ``parent``: a span id derived in ``trace`` or a ``traceparent``; None: the current span."""
    if _tracer is None:
        yield None
        return
    ctx = _parent_context(trace, parent)
    token = _forced.set((trace_int(trace), span_id))
    try:
        s = _tracer.start_span(name, context=ctx, attributes=_attrs(attributes))
    finally:
        _forced.reset(token)
    from opentelemetry import trace as ot

    with ot.use_span(s, end_on_exit=True, record_exception=True, set_status_on_exception=True):
        yield s


def record(
    name: str,
    trace: str,
    *,
    span_id: int,
    parent: int | None = None,
    start: str | int | None = None,
    end: str | int | None = None,
    attributes: dict[str, Any] | None = None,
) -> None:
    """A span that already happened (times: ISO timestamps or ns); nothing when off."""
    if _tracer is None:
        return
    ctx = _parent_context(trace, parent) if parent is not None else None
    if ctx is None:
        from opentelemetry import context as otctx

        ctx = otctx.Context()  # a root: not under whatever is current here
    token = _forced.set((trace_int(trace), span_id))
    try:
        start_ns = start if isinstance(start, int) else _ns(start)
        s = _tracer.start_span(name, context=ctx, attributes=_attrs(attributes), start_time=start_ns)
    finally:
        _forced.reset(token)
    s.end(end_time=end if isinstance(end, int) else _ns(end))


def _attrs(attributes: dict[str, Any] | None) -> dict[str, Any] | None:
    if not attributes:
        return None
    return {f"noetl.{k}": v for k, v in attributes.items() if isinstance(v, str | int | float | bool)}
