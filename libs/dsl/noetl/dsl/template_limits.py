"""Work and size limits for template evaluation.

Templates come from playbooks, and playbooks are user input that the server evaluates while it
folds events: one ``{{ 'x' * 10**9 }}`` or ``{% for i in range(10**5) %}{% for j in ... %}``
would stall every execution that server handles. The sandbox stops templates from reaching
Python internals but not from building huge values or spinning, so every place where a
template can amplify a value (operators, the padding/joining string methods, the filters with a
width or a fill, ``range``) is checked *before* the value is built, and the work a single
render may do (loop iterations plus calls) is counted. The checks estimate conservatively and
cheaply; a value the template merely reads from its context is never measured, because it is
data the engine already holds.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2.runtime import Undefined
from jinja2.utils import _PassArg

from noetl.dsl.errors import TemplateLimitError as TemplateLimitError


@dataclass(frozen=True)
class Limits:
    max_chars: int = 1 << 20        # characters of a rendered or built string (weight of a built list)
    max_range: int = 100_000        # items of one range()
    max_ops: int = 1_000_000        # loop iterations plus calls in one render
    # items and characters that filters may process in one render: a filter's work grows with its
    # input (``list``, ``sort``, ``unique`` on a long string or list), which one op does not count
    max_work: int = 1_000_000


def weight(value: Any, cap: int) -> int:
    """Approximate size of a value: string lengths plus one per item; stops counting past ``cap``.

    Deliberately rough: it is a guard against amplification, not an accounting of memory.
    """
    total = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, (str, bytes)):
            total += len(item)
        elif isinstance(item, Mapping):
            total += len(item)
            if total <= cap:
                stack.extend(item.keys())
                stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            total += len(item)
            if total <= cap:
                stack.extend(item)
        else:
            total += 1
        if total > cap:
            return total
    return total


def too_big(limits: Limits, what: str) -> TemplateLimitError:
    return TemplateLimitError(f"{what} exceeds the template size limit ({limits.max_chars} characters)")


def check_size(limits: Limits, size: int, what: str = "the value") -> None:
    if size > limits.max_chars:
        raise too_big(limits, what)


def check_built(limits: Limits, value: Any) -> Any:
    """After a call: refuse a built string or collection past the limit (catches what no
    pre-check anticipated, before it travels further)."""
    if isinstance(value, (str, bytes, list, tuple, dict)) and len(value) > limits.max_chars:
        raise too_big(limits, f"a {type(value).__name__} of {len(value)} items")
    return value


def spend(context: Any, limits: Limits) -> None:
    """Count one unit of work (a loop iteration or a call) against the render's budget."""
    left = context.noetl_ops - 1
    context.noetl_ops = left
    if left < 0:
        raise TemplateLimitError(f"the template does too much work (more than {limits.max_ops} loop "
                            "iterations and calls in one render)")


def charge(context: Any, limits: Limits, units: int) -> None:
    """Spend ``units`` of the render's work budget: deterministic, so a replay fails the same way
    (a CPU-time budget would depend on the machine, and the engine's decisions may not)."""
    left = context.noetl_work - units
    context.noetl_work = left
    if left < 0:
        raise TemplateLimitError(
            f"the template does too much work (its filters would process more than {limits.max_work} "
            "items and characters in one render); work on less data, or in a python task"
        )


def _input_size(value: Any) -> int:
    """O(1): the top-level length of a filter's input, the measure of what the filter walks."""
    try:
        return len(value) if isinstance(value, str | bytes | list | tuple | dict | set | frozenset) else 1
    except TypeError:
        return 1


# filters that call Python code per element (a key function, a test, an attribute lookup): about a
# microsecond an element where ``list`` or ``length`` take nanoseconds, so they cost more per item
_PER_ELEMENT = frozenset(
    {"sort", "unique", "groupby", "dictsort", "map", "select", "reject", "selectattr", "rejectattr",
     "min", "max", "sum"}
)
_PER_ELEMENT_COST = 4


def meter_filters(filters: dict[str, Callable[..., Any]], limits: Limits) -> None:
    """Every filter charges the size of its input to the render's work budget (in place)."""
    for name, orig in list(filters.items()):
        filters[name] = _metered(orig, limits, _PER_ELEMENT_COST if name in _PER_ELEMENT else 1)


def _metered(orig: Callable[..., Any], limits: Limits, per_item: int) -> Callable[..., Any]:
    passes = getattr(orig, "jinja_pass_arg", None)

    @functools.wraps(orig)
    def metered(context: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            charge(context, limits, 1 + per_item * _input_size(args[0]))
        if passes is _PassArg.context:
            return orig(context, *args, **kwargs)
        if passes is _PassArg.eval_context:
            return orig(context.eval_ctx, *args, **kwargs)
        if passes is _PassArg.environment:
            return orig(context.environment, *args, **kwargs)
        return orig(*args, **kwargs)

    metered.jinja_pass_arg = _PassArg.context  # type: ignore[attr-defined]
    return metered


def guarded_range(limits: Limits) -> Callable[..., range]:
    def range_(*args: int) -> range:
        rng = range(*args)
        if len(rng) > limits.max_range:
            raise TemplateLimitError(f"range of {len(rng)} items exceeds the limit ({limits.max_range})")
        return rng

    return range_


def guarded_iter(limits: Limits) -> Callable[[Any, Any], Iterable[Any]]:
    """The ``for`` loop wrapper: every iteration spends one unit of the render's budget."""

    def iterate(context: Any, iterable: Any) -> Iterable[Any]:
        if isinstance(iterable, Undefined):
            iterable._fail_with_undefined_error()
        for item in iterable:
            spend(context, limits)
            yield item

    return iterate


# -- operators --------------------------------------------------------------------------------

_SEQ = (str, bytes, list, tuple)
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _limbs(n: int) -> int:
    """64-bit words of an integer: the unit its arithmetic costs are counted in."""
    return n.bit_length() // 64 + 1


def _int_mul_cost(a: int, b: int) -> int:
    """Work units of ``a * b`` on big integers: schoolbook for a small operand, Karatsuba
    (exponent 1.585) otherwise, about ten units per microsecond of CPython's arithmetic."""
    la, lb = _limbs(a), _limbs(b)
    return int(min(la * lb, max(la, lb) ** 1.585)) // 10


def _int_pow_cost(base: int, exp: int) -> int:
    """Work units of ``base ** exp``: the result's words to the Karatsuba exponent (squarings
    dominate), so ``3 ** 4000000`` (99 000 words, 0.6 s) is refused and ``2 ** 64`` is free."""
    if exp <= 1 or abs(base) <= 1:
        return 0
    words = exp * abs(base).bit_length() // 64 + 1
    return int(words**1.585) // 10


def _int_div_cost(a: int, b: int) -> int:
    """Work units of ``a // b`` or ``a % b``: CPython divides long integers in schoolbook time."""
    la, lb = _limbs(a), _limbs(b)
    return la * lb // 64 if la > 1 and lb > 1 else la // 64


# items copied per work unit when a sequence is repeated or a string formatted: a copy is a
# memcpy, far cheaper per item than a filter's walk, yet a loop of them adds up
_COPY_PER_UNIT = 16


def _charge(context: Any, limits: Limits, units: int, what: str) -> None:
    """``charge`` for an operator, with a message naming it; contexts without a budget (none
    the engine renders with) are not charged."""
    if units <= 0 or context is None or not hasattr(context, "noetl_work"):
        return
    left = context.noetl_work - units
    context.noetl_work = left
    if left < 0:
        raise TemplateLimitError(
            f"the template does too much work ({what} costs {units} units; a render may spend "
            f"{limits.max_work}); compute it in a python task"
        )


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def binop(limits: Limits, operator: str, left: Any, right: Any, context: Any = None) -> Any:
    """``+ * ** % //`` with the size of the result checked before it is computed and, with the
    render's ``context``, their work charged to its budget in proportion to the operands: big-int
    arithmetic is superlinear, and a size check alone let ``3 ** 4000000 % 7`` (a small result)
    spend 0.6 s of a partition's loop."""
    cap = limits.max_chars
    if operator == "+":
        if isinstance(left, _SEQ) and isinstance(right, _SEQ):
            check_size(limits, weight(left, cap) + weight(right, cap), "a concatenation")
        return left + right
    if operator == "*":
        if _is_int(left) and _is_int(right):
            check_size(limits, (left.bit_length() + right.bit_length()) // 8, "an integer product")
            _charge(context, limits, _int_mul_cost(left, right), "an integer product")
        elif isinstance(left, _SEQ) and _is_int(right) and right > 0:
            size = weight(left, cap) * right
            check_size(limits, size, "a repeated sequence")
            _charge(context, limits, size // _COPY_PER_UNIT, "a repeated sequence")
        elif isinstance(right, _SEQ) and _is_int(left) and left > 0:
            size = weight(right, cap) * left
            check_size(limits, size, "a repeated sequence")
            _charge(context, limits, size // _COPY_PER_UNIT, "a repeated sequence")
        return left * right
    if operator == "**":
        if _is_int(left) and _is_int(right) and right > 0 and abs(left) > 1:
            check_size(limits, right * abs(left).bit_length() // 8, "a power")
            _charge(context, limits, _int_pow_cost(left, right), "a power")
        return left**right
    if operator in ("%", "//"):
        if operator == "%" and isinstance(left, str):
            check_printf(limits, left, right)
            out = check_built(limits, left % right)
            _charge(context, limits, len(out) // _COPY_PER_UNIT, "a string format")
            return out
        if _is_int(left) and _is_int(right):
            _charge(context, limits, _int_div_cost(left, right), "an integer division")
        return left % right if operator == "%" else left // right
    raise ValueError(f"operator {operator!r} is not intercepted")


def check_printf(limits: Limits, fmt: str, values: Any) -> None:
    """A printf width or precision is an amplifier (``'%0999999999d' % 1``): bound it."""
    star = False
    for width, precision in _PRINTF.findall(fmt):
        for n in (width, precision):
            if n == "*":
                star = True
            elif n and int(n) > limits.max_chars:
                raise too_big(limits, f"a format width of {n}")
    if star:
        seq = values if isinstance(values, tuple) else (values,)
        for v in seq:
            if isinstance(v, int) and v > limits.max_chars:
                raise too_big(limits, f"a format width of {v}")


def check_format_spec(limits: Limits, spec: str) -> None:
    """The ``str.format`` counterpart of :func:`check_printf` (``'{:>999999999}'``)."""
    for n in re.findall(r"\d+", spec):
        if int(n) > limits.max_chars:
            raise too_big(limits, f"a format width of {n}")


# -- methods ----------------------------------------------------------------------------------


# -- filters ----------------------------------------------------------------------------------
