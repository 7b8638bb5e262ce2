"""Prechecks of the string methods and filters a template calls (`center`, `indent`, `wordwrap`,
`format`, `replace`, `tojson`, `join`, ...): what the result would cost is checked against the
render's ``Limits`` before the call builds it. Used by ``noetl.dsl.template_env``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from jinja2.runtime import Undefined

from noetl.dsl.template_limits import (
    Limits,
    TemplateLimitError,
    check_built,
    check_printf,
    check_size,
    weight,
)


def _arg(args: tuple[Any, ...], kwargs: Mapping[str, Any], i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def _replace_size(s: str | bytes, old: Any, new: Any, count: Any) -> int:
    if not isinstance(old, (str, bytes)) or not isinstance(new, (str, bytes)):
        return len(s)
    hits = len(s) + 1 if not old else s.count(old)  # type: ignore[arg-type]
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(s) + hits * max(len(new) - len(old), 0)


def precheck_method(limits: Limits, owner: Any, name: str, args: tuple[Any, ...],
                    kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """Bound the string methods that can multiply their input, before they run.

    Returns the arguments to call with (``join`` materializes its iterable to measure it).
    """
    cap = limits.max_chars
    if isinstance(owner, int):
        if name == "to_bytes":
            check_size(limits, _int(_arg(args, kwargs, 0, "length", 1)), "to_bytes()")
        return args
    if name in ("center", "ljust", "rjust", "zfill"):
        check_size(limits, _int(_arg(args, kwargs, 0, "width", 0)), f"{name}()")
    elif name == "expandtabs":
        tab = _int(_arg(args, kwargs, 0, "tabsize", 8))
        tabs = owner.count("\t" if isinstance(owner, str) else b"\t")
        check_size(limits, len(owner) + tabs * tab, "expandtabs()")
    elif name == "replace" and len(args) >= 2:
        count = _arg(args, kwargs, 2, "count", -1)
        check_size(limits, _replace_size(owner, args[0], args[1], count), "replace()")
    elif name == "join" and args:
        items = list(args[0])
        check_size(limits, weight(items, cap) + len(owner) * len(items), "join()")
        return (items, *args[1:])
    elif name == "translate" and args and isinstance(args[0], Mapping):
        widest = max((len(v) for v in args[0].values() if isinstance(v, (str, bytes))), default=1)
        check_size(limits, len(owner) * widest, "translate()")
    return args


def _int(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _pre_center(limits: Limits, value: Any, width: Any = 80, *_: Any, **__: Any) -> None:
    check_size(limits, _int(width), "center")


def _pre_indent(limits: Limits, s: Any, width: Any = 4, *_: Any, **__: Any) -> None:
    text = str(s)
    step = len(width) if isinstance(width, str) else _int(width)
    check_size(limits, len(text) + (text.count("\n") + 1) * step, "indent")


def _pre_wordwrap(limits: Limits, s: Any, width: Any = 79, _long: Any = True, wrapstring: Any = None,
                  *_: Any, **__: Any) -> None:
    text = str(s)
    lines = len(text) // max(_int(width), 1) + text.count("\n") + 1
    check_size(limits, len(text) + lines * len(str(wrapstring or "\n")), "wordwrap")


def _pre_format(limits: Limits, value: Any, *args: Any, **kwargs: Any) -> None:
    check_printf(limits, str(value), tuple(args))


def _pre_replace(limits: Limits, s: Any, old: Any = "", new: Any = "", count: Any = None,
                 *_: Any, **__: Any) -> None:
    check_size(limits, _replace_size(str(s), old, new, count), "replace")


def _pre_tojson(limits: Limits, value: Any, indent: Any = None, *_: Any, **__: Any) -> None:
    if isinstance(indent, int) and indent > 16:
        raise TemplateLimitError(f"tojson indent {indent} is larger than 16")


def _pre_count(name: str, index: int) -> Callable[..., None]:
    def pre(limits: Limits, *args: Any, **kwargs: Any) -> None:
        n = args[index] if len(args) > index else kwargs.get(name, 0)
        check_size(limits, _int(n), name)

    return pre


_PRECHECKS: dict[str, tuple[int, Callable[..., None]]] = {
    # filter name: (number of leading pass_* arguments, pre-check)
    "center": (0, _pre_center),
    "indent": (0, _pre_indent),
    "wordwrap": (1, _pre_wordwrap),
    "format": (0, _pre_format),
    "replace": (1, _pre_replace),
    "tojson": (1, _pre_tojson),
    "batch": (0, _pre_count("linecount", 1)),
    "slice": (1, _pre_count("slices", 1)),
}


def guard_filters(filters: dict[str, Callable[..., Any]], limits: Limits) -> None:
    """Replace the amplifying filters by checked ones (in place, on one environment's table)."""
    for name, (skip, pre) in _PRECHECKS.items():
        filters[name] = _checked_filter(filters[name], skip, pre, limits)
    filters["join"] = _checked_join(filters["join"], limits)


def _checked_filter(orig: Callable[..., Any], skip: int, pre: Callable[..., None],
                    limits: Limits) -> Callable[..., Any]:
    @functools.wraps(orig)  # keeps jinja_pass_arg, so Jinja still passes the context first
    def checked(*args: Any, **kwargs: Any) -> Any:
        pre(limits, *args[skip:], **kwargs)
        return check_built(limits, orig(*args, **kwargs))

    return checked


def _checked_join(orig: Callable[..., Any], limits: Limits) -> Callable[..., Any]:
    @functools.wraps(orig)
    def checked(eval_ctx: Any, value: Any, d: Any = "", attribute: Any = None) -> Any:
        if isinstance(value, Undefined):
            value._fail_with_undefined_error()
        items = list(value)
        sep = len(d) if isinstance(d, str) else 0
        check_size(limits, weight(items, limits.max_chars) + sep * len(items), "join")
        return check_built(limits, orig(eval_ctx, items, d, attribute))

    return checked
