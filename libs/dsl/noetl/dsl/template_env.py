"""The Jinja2 environment playbook templates run in (SEMANTICS.md §4).

Three departures from stock Jinja, each because a playbook is data written by users:

* ``a.b`` on a mapping is the entry ``b`` or undefined, never a method of the mapping:
  ``workload.items`` must read the workload's ``items`` field, not ``dict.items``.
* Undefined values chain (``outcome.result.a.b | default(0)``) and remember the full dotted
  name they were reached by, so the error for a value that is finally used says
  ``'iter.pge' is undefined (iter has: index, page)`` rather than ``'dict object' has no
  attribute 'pge'``. The dotted name is known at compile time, so the code generator passes it
  along with each lookup; what is there instead (the keys of the mapping the chain broke at, or
  the names defined at the top) is named, never a value, as a context holds credentials.
* Everything that could amplify a value or loop is bounded (``template_limits``), and nothing
  non-deterministic (``random``, ``lipsum``) is offered: the server's engine replays templates.
"""

from __future__ import annotations

import types
from _string import formatter_field_name_split  # type: ignore[import-not-found]
from collections.abc import Iterator, Mapping
from string import Formatter
from typing import Any

from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import TemplateSyntaxError
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, LoopContext, Macro, TemplateReference, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Cycler, Joiner, Namespace, missing, pass_context

from noetl.dsl import template_limits as lim

_NAMES_SHOWN = 30          # names an undefined message lists before it says how many more
_NAME_CHARS = 40           # a key longer than this is cut in the list
_DICT_METHOD_HINTS = {            # what to write instead of the dict method a user reached for
    "items": "use `| items` for the pairs",
    "keys": "use `| list` for the keys",
    "values": "use `| items` for the pairs",
    "get": "use `x['key'] | default(...)`",
}
_ITER_FILTER = "_noetl_iter"


def _suffix(key: Any) -> str:
    if isinstance(key, str) and key.isidentifier():
        return f".{key}"
    return f"[{key!r}]"


def _join(parent: str, suffix: str) -> str:
    return f"{parent}{suffix}" if parent else suffix.lstrip(".")


def _article(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aeiou" else f"a {word}"


def _names(keys: Any) -> str:
    """Names only, never values (a context holds credentials): sorted, public ones first."""
    shown = sorted((k if isinstance(k, str) else repr(k) for k in keys),
                   key=lambda k: (k.startswith("_"), k))
    cut = [k if len(k) <= _NAME_CHARS else k[:_NAME_CHARS] + "..." for k in shown[:_NAMES_SHOWN]]
    more = f", ... ({len(shown) - _NAMES_SHOWN} more)" if len(shown) > _NAMES_SHOWN else ""
    return ", ".join(cut) + more


class _Miss:
    """Where a lookup chain first failed: the name it failed at and what was there instead.

    Kept on the undefined value (a reference, not a copy) so the message, built only when the
    value is finally used, can say what *is* defined at that point; a miss that is defaulted or
    tested costs one small object.
    """

    __slots__ = ("found", "name", "parent", "top")

    def __init__(self, name: str, parent: str, found: Any, *, top: bool = False) -> None:
        self.name = name        # the dotted name the lookup failed at ('iter.num')
        self.parent = parent    # the dotted name of what it was looked up in ('iter')
        self.found = found      # that value (only its keys, type or length are ever shown)
        self.top = top          # a top-level name: ``found`` is the render's context

    def describe(self, full: str) -> str:
        """What the message adds in parentheses: the names that are there instead."""
        found = self.found
        lead = "" if full == self.name else f"{self.name} is undefined; "
        if self.top:
            return f"{lead}defined here: {_names(found)}" if found else f"{lead}nothing is defined here"
        where = self.parent or "the value"
        if isinstance(found, Mapping):
            if not found:
                return f"{lead}{where} is empty"
            return f"{lead}{where} has: {_names(found.keys())}"
        kind = _article(type(found).__name__)
        if isinstance(found, (list, tuple)) and self.name.endswith("]"):
            return f"{lead}{where} is {kind} of {len(found)} items"
        return f"{lead}{where} is {kind}, not a mapping"


class NoetlUndefined(Undefined):
    """Chains through lookups, fails on use (print, iterate, call, arithmetic, order).

    Only ``is defined``, ``default``, truth tests and ``==``/``!=`` are allowed on it; ``==`` is
    always false, even against another undefined value, so a missing field never equals anything.
    """

    __slots__ = ()

    def _chain(self, suffix: str) -> NoetlUndefined:
        if self._undefined_hint is not None:       # e.g. the sandbox's "access ... is unsafe"
            return self
        # the first miss travels along: it is where the chain broke, and what to show
        return NoetlUndefined(obj=self._undefined_obj, name=_join(self._undefined_name or "", suffix),
                              exc=self._undefined_exception)

    @property
    def _undefined_message(self) -> str:
        if self._undefined_hint:
            return self._undefined_hint
        name = str(self._undefined_name)
        miss = self._undefined_obj
        if isinstance(miss, _Miss):
            leaf = name.rsplit(".", 1)[-1]
            if name == miss.name and isinstance(miss.found, Mapping) and leaf in _DICT_METHOD_HINTS:
                return (f"{name!r} is undefined (on a mapping, .{leaf} reads the entry {leaf!r}, "
                        f"not the method: {_DICT_METHOD_HINTS[leaf]})")
            return f"{name!r} is undefined ({miss.describe(name)})"
        if miss is missing:
            return f"{name!r} is undefined"
        return super()._undefined_message

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__":
            raise AttributeError(name)
        return self._chain(f".{name}")

    # jinja2 declares Undefined.__getitem__ as its always-failing function; this one chains instead
    def __getitem__(self, key: Any) -> NoetlUndefined:  # type: ignore[override]
        return self._chain(_suffix(key))

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return True

    __hash__ = Undefined.__hash__
    __str__ = __iter__ = __len__ = __contains__ = __reversed__ = Undefined._fail_with_undefined_error


def node_path(node: nodes.Node) -> str:
    """The dotted name of a lookup chain (``iter.endpoint.path``), '' if it has no plain root."""
    if isinstance(node, nodes.Name):
        return node.name
    if isinstance(node, nodes.Getattr):
        parent = node_path(node.node)
        return f"{parent}.{node.attr}" if parent else ""
    if isinstance(node, nodes.Getitem) and not isinstance(node.arg, nodes.Slice):
        parent = node_path(node.node)
        if not parent:
            return ""
        return parent + (_suffix(node.arg.value) if isinstance(node.arg, nodes.Const) else "[...]")
    return ""


class _CodeGenerator(CodeGenerator):
    """Passes the compile-time dotted name of each lookup to the environment, and guards ``~``."""

    @optimizeconst
    def visit_Getattr(self, node: nodes.Getattr, frame: Frame) -> None:
        self.write("environment.getattr_at(")
        self.visit(node.node, frame)
        self.write(f", {node.attr!r}, {node_path(node.node)!r})")

    @optimizeconst
    def visit_Getitem(self, node: nodes.Getitem, frame: Frame) -> None:
        if isinstance(node.arg, nodes.Slice):
            self.visit(node.node, frame)
            self.write("[")
            self.visit(node.arg, frame)
            self.write("]")
            return
        self.write("environment.getitem_at(")
        self.visit(node.node, frame)
        self.write(", ")
        self.visit(node.arg, frame)
        self.write(f", {node_path(node.node)!r})")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile or frame.eval_ctx.autoescape:
            super().visit_Concat(node, frame)
            return
        self.write("environment.concat_checked((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class RenderContext(Context):
    """A Jinja context that reads the caller's mapping in place (no copy with the globals) and
    carries the render's work budget."""

    noetl_ops: int = lim.Limits.max_ops
    noetl_work: int = lim.Limits.max_work
    noetl_globals: Mapping[str, Any] = types.MappingProxyType({})

    @classmethod
    def fresh(cls, env: NoetlSandbox, data: Mapping[str, Any]) -> RenderContext:
        ctx = cls.__new__(cls)
        ctx.parent = data          # type: ignore[assignment]
        ctx.vars = {}
        ctx.environment = env
        ctx.eval_ctx = EvalContext(env, None)
        ctx.exported_vars = set()
        ctx.name = None
        ctx.globals_keys = set()
        ctx.blocks = {}
        ctx.noetl_globals = env.globals
        ctx.noetl_ops = env.limits.max_ops
        ctx.noetl_work = env.limits.max_work
        return ctx

    def resolve_or_missing(self, key: str) -> Any:
        if key in self.vars:
            return self.vars[key]
        if key in self.parent:
            return self.parent[key]
        found = self.noetl_globals.get(key, missing)
        if found is missing:   # undefined, knowing the names that are defined (for its message)
            return NoetlUndefined(obj=_Miss(key, "", self.parent, top=True), name=key)
        return found


_HELPERS = (Cycler, Joiner, Namespace, LoopContext, Macro, TemplateReference)
_SCALARS = frozenset({str, int, float, bool, type(None)})


def shallow(value: Any, cap: int) -> Any:
    """A template's value as data, looking at the top level only: what a plain lookup returns is
    context data and is passed on as is (cheap for large results). An iterator becomes the list
    it yields; a function or helper object is refused, as its repr would carry a memory address
    (not replayable) and it is no value a task could use."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    if isinstance(value, str):
        return str(value)                             # Markup from tojson & co: a plain string
    if isinstance(value, (Iterator, range)):
        return materialize(value, cap)
    if callable(value) or isinstance(value, _HELPERS):
        raise TypeError(f"a {type(value).__name__} is not a value a template can produce")
    return value


def clean(value: Any, cap: int) -> Any:
    """A JSON-shaped copy of a value the template built: iterators and tuples become lists, and
    an undefined value anywhere inside is an error rather than a silent ``Undefined``."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if isinstance(key, Undefined):
                key._fail_with_undefined_error()
            out[key] = clean(item, cap)
        return out
    if isinstance(value, (list, tuple)):
        return [clean(item, cap) for item in value]
    if isinstance(value, (Iterator, range)):
        return [clean(item, cap) for item in materialize(value, cap)]
    return shallow(value, cap)


def materialize(value: Iterator[Any] | range, cap: int) -> list[Any]:
    out: list[Any] = []
    for item in value:
        out.append(item)
        if len(out) > cap:
            raise lim.LimitExceeded(f"an iterator yields more than {cap} items")
    return out


class _GuardedFormatter(Formatter):
    """``str.format`` inside the sandbox: fields resolve through the environment's lookups and
    widths are bounded."""

    def __init__(self, env: NoetlSandbox) -> None:
        super().__init__()
        self._env = env

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        first, rest = formatter_field_name_split(field_name)
        obj = self.get_value(first, args, kwargs)
        for is_attr, key in rest:
            obj = self._env.getattr(obj, key) if is_attr else self._env.getitem(obj, key)
        return obj, first

    def format_field(self, value: Any, format_spec: str) -> Any:
        lim.check_format_spec(self._env.limits, format_spec)
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        return super().format_field(value, format_spec)


class NoetlSandbox(ImmutableSandboxedEnvironment):
    """The sandboxed environment of one template engine (see the module docstring)."""

    code_generator_class = _CodeGenerator
    context_class = RenderContext
    intercepted_binops = frozenset({"+", "*", "**", "%", "//"})

    def __init__(self, limits: lim.Limits) -> None:
        self.limits = limits
        super().__init__(undefined=NoetlUndefined, finalize=self._printable, autoescape=False,
                         keep_trailing_newline=True, cache_size=0, auto_reload=False)
        self.globals.pop("lipsum", None)
        self.globals["range"] = lim.guarded_range(limits)
        self.filters.pop("random", None)
        lim.guard_filters(self.filters, limits)
        lim.meter_filters(self.filters, limits)
        self.filters[_ITER_FILTER] = pass_context(lim.guarded_iter(limits))

    def _printable(self, value: Any) -> Any:
        """What ``{{ x }}`` prints inside text: data only (see :func:`clean`)."""
        return clean(value, self.limits.max_chars)

    # -- lookups ------------------------------------------------------------------------------

    def getattr_at(self, obj: Any, attribute: str, parent: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except KeyError:
                name = _join(parent, f".{attribute}")
                return NoetlUndefined(name=name, obj=_Miss(name, parent, obj))
        if isinstance(obj, NoetlUndefined):
            return obj._chain(f".{attribute}")
        return self._renamed(super().getattr(obj, attribute), obj, parent, f".{attribute}")

    def getitem_at(self, obj: Any, key: Any, parent: str) -> Any:
        if isinstance(obj, Mapping):
            try:
                return obj[key]
            except (KeyError, TypeError):
                name = _join(parent, _suffix(key))
                return NoetlUndefined(name=name, obj=_Miss(name, parent, obj))
        if isinstance(obj, NoetlUndefined):
            return obj._chain(_suffix(key))
        return self._renamed(super().getitem(obj, key), obj, parent, _suffix(key))

    def getattr(self, obj: Any, attribute: str) -> Any:
        return self.getattr_at(obj, attribute, "")

    def getitem(self, obj: Any, argument: Any) -> Any:
        return self.getitem_at(obj, argument, "")

    @staticmethod
    def _renamed(value: Any, owner: Any, parent: str, suffix: str) -> Any:
        if isinstance(value, Undefined) and value._undefined_hint is None:
            name = _join(parent, suffix)
            return NoetlUndefined(name=name, obj=_Miss(name, parent, owner))
        return value

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        # the ``attr`` filter must not reach a mapping's methods either
        return not isinstance(obj, Mapping) and super().is_safe_attribute(obj, attr, value)

    def wrap_str_format(self, value: Any) -> Any:
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)):
            return None
        if value.__name__ not in ("format", "format_map") or not isinstance(value.__self__, str):
            return None
        template: str = value.__self__
        formatter = _GuardedFormatter(self)
        is_map = value.__name__ == "format_map"

        def format_(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                mapping = args[0]
                args, kwargs = (), mapping
            built: str = lim.check_built(self.limits, formatter.vformat(template, args, kwargs))
            return built

        return format_

    # -- calls and operators ------------------------------------------------------------------

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(__obj, Undefined):
            __obj._fail_with_undefined_error()
        lim.spend(__context, __self.limits)
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, bytes, int)):
            args = lim.precheck_method(__self.limits, owner, __obj.__name__, args, kwargs)
        return lim.check_built(__self.limits, super().call(__context, __obj, *args, **kwargs))

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        return lim.binop(self.limits, operator, left, right, context)

    def concat_checked(self, parts: tuple[Any, ...]) -> str:
        strings = [p if type(p) is str else str(self._printable(p)) for p in parts]
        lim.check_size(self.limits, sum(map(len, strings)), "a ~ concatenation")
        return "".join(strings)

    # -- compilation --------------------------------------------------------------------------

    def prepare(self, tree: nodes.Template) -> nodes.Template:
        """Reject what a playbook template cannot use and route every ``for`` through the work
        budget. Runs on the parsed tree, before code generation."""
        for bad in tree.find_all((nodes.Extends, nodes.Include, nodes.Import, nodes.FromImport)):
            raise TemplateSyntaxError(f"{type(bad).__name__.lower()} is not available in playbook "
                                      "templates", bad.lineno)
        for loop in list(tree.find_all(nodes.For)):
            if loop.recursive:
                raise TemplateSyntaxError("recursive loops are not available in playbook templates",
                                          loop.lineno)
            guard = nodes.Filter(loop.iter, _ITER_FILTER, [], [], None, None, lineno=loop.lineno)
            guard.set_environment(self)
            loop.iter = guard
        return tree
