"""Values crossing a template's boundary: what goes in is copied shallowly and capped, what comes
out is cleaned of Jinja's helper objects and lazy sequences are materialized within the cap.
Used by ``noetl.dsl.template_env``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from jinja2.runtime import LoopContext, Macro, TemplateReference, Undefined
from jinja2.utils import Cycler, Joiner, Namespace

from noetl.dsl import template_limits as lim

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
            raise lim.TemplateLimitError(f"an iterator yields more than {cap} items")
    return out
