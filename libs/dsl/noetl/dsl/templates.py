"""Rendering playbook values through the sandboxed Jinja2 environment (SEMANTICS.md §4).

The engine and the worker render many small templates per event (rule ``when``s, arc ``args``,
task fields), always from the same playbook, so compilation happens once per source string and
each render afterwards is a dictionary lookup plus one call of the compiled code. One engine
per playbook bounds the cache to that playbook's templates; ``ENGINE`` serves everything else.

A value renders like this: a string that is exactly one ``{{ expr }}`` (surrounding whitespace
allowed) evaluates to the expression's native value; any other string renders to a string;
mappings and lists render element by element (keys are never rendered); anything else passes
through. Any failure is a :class:`~noetl.dsl.errors.TemplateError` whose message ends with the
path of the failing value (``... in workflow[2].tool[0].params.page``).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from jinja2 import nodes
from jinja2.exceptions import TemplateError as JinjaTemplateError
from jinja2.exceptions import TemplateSyntaxError

from noetl.dsl.errors import TemplateError
from noetl.dsl.template_env import NoetlSandbox, RenderContext, clean, shallow
from noetl.dsl.template_limits import Limits, TemplateLimitError, too_big

__all__ = ["ENGINE", "NoetlSandbox", "TemplateEngine", "check_syntax", "is_template"]

_CONST, _NATIVE, _TEXT, _BROKEN = range(4)
_RESULT = "_noetl_result_"       # where a native expression leaves its value; '_' keeps it private
# filters whose output is a new container that may hold undefined values or iterators
_BUILDING_FILTERS = frozenset({"list", "map", "select", "reject", "selectattr", "rejectattr", "batch",
                               "slice", "sort", "dictsort", "unique", "groupby", "items", "reverse"})

Entry = tuple[int, Any, bool]     # (kind, constant | message | compiled root function, scan)


def is_template(value: Any) -> bool:
    """True when ``value`` is a string holding Jinja markup (otherwise it renders to itself)."""
    return isinstance(value, str) and ("{{" in value or "{%" in value or "{#" in value)


class _LeafError(TemplateError):
    """A leaf failed; containers add their key to ``trail`` as the exception unwinds, so the
    path is only built when something actually fails."""

    def __init__(self, message: str, source: str) -> None:
        super().__init__(message)
        self.message = message
        self.source = source
        self.trail: list[str] = []

    def to_error(self, path: str) -> TemplateError:
        full = path + "".join(reversed(self.trail))
        if not path:
            full = full.lstrip(".")
        message = f"{self.message} in {full}" if full else self.message
        return TemplateError(message, path=full, template=self.source[:200])


def _segment(key: Any) -> str:
    if isinstance(key, str) and key and not any(c in key for c in ".[]'\" "):
        return f".{key}"
    return f"[{key!r}]"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, (JinjaTemplateError, TemplateLimitError)):
        return str(exc).rstrip(".")
    if isinstance(exc, RecursionError):
        return "the template recurses too deeply"
    return f"{type(exc).__name__}: {exc}"


def _syntax_message(exc: Exception) -> str:
    if isinstance(exc, TemplateSyntaxError):
        return f"template syntax error: {(exc.message or '').rstrip('.')} (line {exc.lineno})"
    return f"template cannot be compiled: {type(exc).__name__}"


class _Scope:
    """One render call's view of the caller's context; the Jinja context is built on first use
    and shared by every template of the call (a dict of ten fields costs one context)."""

    __slots__ = ("data", "jctx", "work")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.jctx: RenderContext | None = None
        self.work = 0  # the work budget the context started with


class TemplateEngine:
    """Compiles each template source once and renders values against a context mapping."""

    def __init__(self, *, max_chars: int = 1 << 20, max_range: int = 100_000,
                 max_ops: int = 1_000_000, cache_size: int = 4096) -> None:
        self.limits = Limits(max_chars=max_chars, max_range=max_range, max_ops=max_ops)
        self.env = NoetlSandbox(self.limits)
        self._cache_size = cache_size
        self._native: dict[str, Entry] = {}
        self._text: dict[str, Entry] = {}
        # work left to every render inside ``shared_budget``: per context, as the server may
        # decide one execution in a thread while others render on its event loop
        self._shared: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
            f"noetl_shared_budget_{id(self)}", default=None
        )

    @contextlib.contextmanager
    def shared_budget(self, units: int) -> Iterator[None]:
        """Renders inside share ``units`` of filter work on top of their own limit: the server
        gives one decision (every admission, arc and argument it renders) this much, so one
        input cannot hold the decision loop for the sum of many renders' budgets."""
        token = self._shared.set([units])
        try:
            yield
        finally:
            self._shared.reset(token)

    def _spent(self, scope: _Scope) -> None:
        shared = self._shared.get()
        if shared is not None and scope.jctx is not None:
            shared[0] -= scope.work - scope.jctx.noetl_work

    # -- public -------------------------------------------------------------------------------

    def render(self, value: Any, context: Mapping[str, Any], path: str = "") -> Any:
        """Render ``value`` (see the module docstring); raises TemplateError naming ``path``."""
        if type(value) is str and "{" not in value:
            return value
        scope = _Scope(context)
        try:
            return self._walk(value, scope)
        except _LeafError as failure:
            raise failure.to_error(path) from failure.__cause__
        finally:
            self._spent(scope)

    def render_str(self, source: str, context: Mapping[str, Any], path: str = "") -> str:
        """Render ``source`` to a string, even when it is a single ``{{ expr }}``."""
        entry = self._text.get(source) or self._compile(source, native=False)
        scope = _Scope(context)
        try:
            return self._run(entry, source, scope)  # type: ignore[no-any-return]
        except _LeafError as failure:
            raise failure.to_error(path) from failure.__cause__
        finally:
            self._spent(scope)

    def check_syntax(self, source: str) -> str | None:
        """The syntax error of ``source`` as a message, or None when it compiles."""
        if not is_template(source):
            return None
        try:
            self.env.compile(self.env.prepare(self.env.parse(source)))
        except Exception as exc:
            return _syntax_message(exc)
        return None

    def cache_info(self) -> dict[str, int]:
        return {"native": len(self._native), "text": len(self._text), "max": self._cache_size}

    # -- walking ------------------------------------------------------------------------------

    def _walk(self, value: Any, scope: _Scope) -> Any:
        if isinstance(value, str):
            entry = self._native.get(value)
            if entry is None:
                if "{" not in value:
                    return value
                entry = self._compile(value, native=True)
            return self._run(entry, value, scope)
        if isinstance(value, Mapping):
            out: dict[Any, Any] = {}
            for key, item in value.items():
                try:
                    out[key] = self._walk(item, scope)
                except _LeafError as failure:
                    failure.trail.append(_segment(key))
                    raise
            return out
        if isinstance(value, (list, tuple)):
            items: list[Any] = []
            for index, item in enumerate(value):
                try:
                    items.append(self._walk(item, scope))
                except _LeafError as failure:
                    failure.trail.append(f"[{index}]")
                    raise
            return items
        return value

    def _run(self, entry: Entry, source: str, scope: _Scope) -> Any:
        kind, payload, scan = entry
        if kind == _CONST:
            return payload
        if kind == _BROKEN:
            raise _LeafError(payload, source)
        ctx = scope.jctx
        if ctx is None:
            ctx = scope.jctx = RenderContext.fresh(self.env, scope.data)
            shared = self._shared.get()
            if shared is not None:
                ctx.noetl_work = max(0, min(ctx.noetl_work, shared[0]))
            scope.work = ctx.noetl_work
        try:
            if kind == _NATIVE:
                for _ in payload(ctx):
                    pass
                value = ctx.vars.pop(_RESULT)
                return clean(value, self.limits.max_chars) if scan else shallow(value, self.limits.max_chars)
            return self._stream(payload, ctx)
        except Exception as exc:
            raise _LeafError(_describe(exc), source) from exc
        finally:
            if ctx.vars:                       # a {% set %} must not leak into the next template
                ctx.vars.clear()
                ctx.exported_vars.clear()

    def _stream(self, root: Any, ctx: RenderContext) -> str:
        """Join the output while counting it, so a runaway loop stops at the limit rather than
        after building the whole string."""
        limit = self.limits.max_chars
        parts: list[str] = []
        size = 0
        for chunk in root(ctx):
            size += len(chunk)
            if size > limit:
                raise too_big(self.limits, "the rendered text")
            parts.append(chunk)
        return "".join(parts)

    # -- compiling ----------------------------------------------------------------------------

    def _compile(self, source: str, *, native: bool) -> Entry:
        env = self.env
        try:
            tree = env.prepare(env.parse(source))
            expr = _single_expression(tree) if native else None
            if expr is not None:
                body = nodes.Template([nodes.Assign(nodes.Name(_RESULT, "store"), expr, lineno=1)],
                                      lineno=1)
                body.set_environment(env)
                entry: Entry = (_NATIVE, self._root(body), _needs_scan(expr))
            elif all(isinstance(n, nodes.Output) and all(isinstance(c, nodes.TemplateData)
                                                         for c in n.nodes) for n in tree.body):
                text = "".join(c.data for n in tree.body for c in n.nodes)  # type: ignore[attr-defined]
                entry = (_CONST, text, False)
            else:
                entry = (_TEXT, self._root(tree), False)
        except Exception as exc:   # hostile input can also fail as RecursionError, SyntaxError, ...
            entry = (_BROKEN, _syntax_message(exc), False)
        cache = self._native if native else self._text
        if len(cache) >= self._cache_size:
            try:
                cache.pop(next(iter(cache)), None)   # oldest first; races only re-compile
            except (StopIteration, RuntimeError):
                pass
        cache[source] = entry
        return entry

    def _root(self, tree: nodes.Template) -> Any:
        code = self.env.compile(tree)
        return self.env.template_class.from_code(self.env, code, self.env.globals).root_render_func


def _single_expression(tree: nodes.Template) -> nodes.Expr | None:
    """The expression of a template that is exactly one ``{{ expr }}`` plus whitespace."""
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    exprs = [n for n in tree.body[0].nodes
             if not (isinstance(n, nodes.TemplateData) and not n.data.strip())]
    if len(exprs) != 1 or isinstance(exprs[0], nodes.TemplateData):
        return None
    return exprs[0]


def _needs_scan(expr: nodes.Expr) -> bool:
    """Whether the expression can build a container (which may then hold undefined values or
    iterators). A plain lookup (``{{ _prev }}``) returns context data as is and is not walked,
    which keeps large results cheap to pass along."""
    for node in (expr, *expr.find_all(nodes.Expr)):
        if isinstance(node, (nodes.List, nodes.Dict, nodes.Tuple, nodes.Call)):
            return True
        if isinstance(node, nodes.Filter) and node.name in _BUILDING_FILTERS:
            return True
    return False


ENGINE = TemplateEngine()


def check_syntax(source: str) -> str | None:
    """The syntax error of a template source as a message, or None (uses :data:`ENGINE`)."""
    return ENGINE.check_syntax(source)
