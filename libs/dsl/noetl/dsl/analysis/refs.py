"""What a template reads: its free names, and the first key it reads under each.

``{{ ctx.pages | default(0) + args.n }}`` reads ``ctx`` (key ``pages``, guarded by ``default``)
and ``args`` (key ``n``, unguarded). A read is *guarded* when the chain it starts is the subject
of ``default`` or of an ``is defined`` / ``is undefined`` test: such a template cannot fail on
the value being missing, so the checks treat it as deliberate.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jinja2 import meta, nodes

from noetl.dsl.templates import ENGINE, is_template

_GUARD_FILTERS = frozenset({"default", "d"})
_GUARD_TESTS = frozenset({"defined", "undefined"})


@dataclass(frozen=True)
class Ref:
    name: str
    key: str | None  # the first attribute or constant index read under the name
    guarded: bool


def _parents(tree: nodes.Node) -> dict[int, nodes.Node]:
    out: dict[int, nodes.Node] = {}
    stack = [tree]
    while stack:
        node = stack.pop()
        for child in node.iter_child_nodes():
            out[id(child)] = node
            stack.append(child)
    return out


def _ref(name: nodes.Name, parents: dict[int, nodes.Node]) -> Ref:
    cur: nodes.Node = name
    key: str | None = None
    first = True
    while True:
        parent = parents.get(id(cur))
        if isinstance(parent, nodes.Getattr) and parent.node is cur:
            step: Any = parent.attr
        elif isinstance(parent, nodes.Getitem) and parent.node is cur:
            step = parent.arg.value if isinstance(parent.arg, nodes.Const) else None
        else:
            break
        if first:
            key = step if isinstance(step, str) else None
            first = False
        cur = parent
    parent = parents.get(id(cur))
    guarded = (isinstance(parent, nodes.Filter) and parent.name in _GUARD_FILTERS and parent.node is cur) or (
        isinstance(parent, nodes.Test) and parent.name in _GUARD_TESTS and parent.node is cur
    )
    return Ref(name.name, key, guarded)


@lru_cache(maxsize=4096)
def template_refs(source: str) -> tuple[Ref, ...]:
    """Every read of a free name in ``source`` (empty for plain text or a broken template)."""
    if not is_template(source):
        return ()
    try:
        tree = ENGINE.env.parse(source)
        free = meta.find_undeclared_variables(tree) - set(ENGINE.env.globals)
    except Exception:
        return ()
    parents = _parents(tree)
    return tuple(_ref(n, parents) for n in tree.find_all(nodes.Name) if n.ctx == "load" and n.name in free)


def strings(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every string inside ``value`` with its path below it."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            yield where, node
        elif isinstance(node, dict):
            stack.extend((v, (*where, k)) for k, v in reversed(list(node.items())))
        elif isinstance(node, list | tuple):
            stack.extend((v, (*where, i)) for i, v in reversed(list(enumerate(node))))


def value_refs(value: Any) -> Iterator[tuple[tuple[Any, ...], Ref]]:
    """Every read in every template inside ``value``, with the path of the string."""
    for where, text in strings(value):
        for ref in template_refs(text):
            yield where, ref
