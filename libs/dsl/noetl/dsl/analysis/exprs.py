"""A three-valued reading of the expressions in guards: true, false, or *unknown*.

The checks ask questions such as "can this arc's `when` be true when its step ends with
`step.done`?" without any data. Rendering with made-up values would answer for those values
only, so instead the expression's Jinja AST is evaluated over a tiny domain: a value is known
(a Python value), :data:`ABSENT` (undefined, as a missing ctx key is at run time) or
:data:`UNKNOWN` (anything). Whatever the evaluator does not model is unknown, so a "false" answer
is a proof and the checks built on it never report a guard that some run could make true.

The semantics follow the engine's (SEMANTICS §4): an undefined value is falsy, equal to nothing
and unequal to everything, and ``default`` replaces it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import nodes

from noetl.dsl.templates import ENGINE, is_template


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


ABSENT: Any = _Marker("ABSENT")
UNKNOWN: Any = _Marker("UNKNOWN")

_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "lteq": operator.le,
    "gt": operator.gt,
    "gteq": operator.ge,
    "in": lambda a, b: a in b,
    "notin": lambda a, b: a not in b,
}
_FILTERS: dict[str, Callable[[Any], Any]] = {
    "int": int,
    "float": float,
    "string": str,
    "lower": str.lower,
    "upper": str.upper,
    "length": len,
    "count": len,
    "bool": bool,
}


def parse_expression(source: str) -> nodes.Expr | None:
    """The expression of a template that is exactly one ``{{ expr }}``; None otherwise."""
    try:
        tree = ENGINE.env.parse(source)
    except Exception:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], nodes.Output):
        return None
    parts = [n for n in tree.body[0].nodes if not (isinstance(n, nodes.TemplateData) and not n.data.strip())]
    if len(parts) != 1 or isinstance(parts[0], nodes.TemplateData):
        return None
    return parts[0]


def _has_unknown(value: Any) -> bool:
    if value is UNKNOWN or value is ABSENT:
        return True
    if isinstance(value, dict):
        return any(_has_unknown(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_unknown(v) for v in value)
    return False


def truth(value: Any) -> Any:
    """True, False or UNKNOWN."""
    if value is UNKNOWN:
        return UNKNOWN
    if value is ABSENT:
        return False
    try:
        return bool(value)
    except Exception:
        return UNKNOWN


class Evaluator:
    """Evaluates an expression against ``env`` (name → value); names not in ``env`` are unknown."""

    def __init__(self, env: Mapping[str, Any]) -> None:
        self.env = env

    def value(self, node: nodes.Node) -> Any:
        method = getattr(self, f"_{type(node).__name__}", None)
        if method is None:
            return UNKNOWN
        try:
            return method(node)
        except Exception:
            return UNKNOWN

    def _Const(self, node: nodes.Const) -> Any:
        return node.value

    def _Name(self, node: nodes.Name) -> Any:
        return self.env.get(node.name, UNKNOWN)

    def _lookup(self, base: Any, key: Any) -> Any:
        if base is UNKNOWN or base is ABSENT:
            return base
        if isinstance(base, dict):
            return base.get(key, ABSENT)
        return UNKNOWN

    def _Getattr(self, node: nodes.Getattr) -> Any:
        return self._lookup(self.value(node.node), node.attr)

    def _Getitem(self, node: nodes.Getitem) -> Any:
        key = self.value(node.arg)
        if _has_unknown(key):
            return UNKNOWN
        return self._lookup(self.value(node.node), key)

    def _List(self, node: nodes.List) -> Any:
        return [self.value(item) for item in node.items]

    _Tuple = _List

    def _Not(self, node: nodes.Not) -> Any:
        t = truth(self.value(node.node))
        return UNKNOWN if t is UNKNOWN else not t

    def _And(self, node: nodes.And) -> Any:
        left, right = truth(self.value(node.left)), truth(self.value(node.right))
        if left is False or right is False:
            return False
        return True if left is True and right is True else UNKNOWN

    def _Or(self, node: nodes.Or) -> Any:
        left, right = truth(self.value(node.left)), truth(self.value(node.right))
        if left is True or right is True:
            return True
        return False if left is False and right is False else UNKNOWN

    def _CondExpr(self, node: nodes.CondExpr) -> Any:
        test = truth(self.value(node.test))
        if test is UNKNOWN:
            return UNKNOWN
        if test:
            return self.value(node.expr1)
        return self.value(node.expr2) if node.expr2 is not None else ABSENT

    def _Compare(self, node: nodes.Compare) -> Any:
        left = self.value(node.expr)
        result: Any = True
        for op in node.ops:
            right = self.value(op.expr)
            step = self._compare(op.op, left, right)
            if step is False:
                return False
            if step is UNKNOWN:
                result = UNKNOWN
            left = right
        return result

    def _compare(self, op: str, left: Any, right: Any) -> Any:
        if left is UNKNOWN or right is UNKNOWN:
            return UNKNOWN
        if left is ABSENT or right is ABSENT:  # undefined equals nothing (SEMANTICS §4)
            return {"eq": False, "ne": True}.get(op, UNKNOWN)
        if _has_unknown(left) or _has_unknown(right):
            return UNKNOWN
        return bool(_COMPARE[op](left, right))

    def _Filter(self, node: nodes.Filter) -> Any:
        inner = self.value(node.node) if node.node is not None else UNKNOWN
        if node.name in ("default", "d"):
            if inner is ABSENT:
                return self.value(node.args[0]) if node.args else ""
            return inner
        if inner is UNKNOWN or inner is ABSENT or node.name not in _FILTERS or node.args:
            return UNKNOWN
        return _FILTERS[node.name](inner)

    def _Test(self, node: nodes.Test) -> Any:
        inner = self.value(node.node)
        if inner is UNKNOWN:
            return UNKNOWN
        if node.name == "defined":
            return inner is not ABSENT
        if node.name == "undefined":
            return inner is ABSENT
        if node.name == "none":
            return inner is None
        return UNKNOWN


def evaluate(template: Any, env: Mapping[str, Any]) -> Any:
    """The truth of a guard (``when``) against ``env``: True, False or UNKNOWN.

    ``None`` (no guard) is true; a plain string is its own value; a template that is more than
    one expression renders to text, which the evaluator does not model.
    """
    if template is None:
        return True
    if isinstance(template, bool):
        return template
    if not is_template(template):
        return truth(template)
    expr = parse_expression(template)
    if expr is None:
        return UNKNOWN
    return truth(Evaluator(env).value(expr))


def literal(value: Any) -> Any:
    """A written value as the evaluator sees it: templates are unknown, the rest is known."""
    if isinstance(value, str):
        if not is_template(value):
            return value
        expr = parse_expression(value)
        if isinstance(expr, nodes.Const):
            return expr.value
        return UNKNOWN
    if isinstance(value, dict):
        return {k: literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal(v) for v in value]
    return value
