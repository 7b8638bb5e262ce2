"""A YAML document with where each entry came from and the comments around it.

PyYAML forgets comments, and no round-trip YAML library is a dependency, so the comments are
read from the text here: a ``#`` that starts a comment is one outside every scalar's span (a
``#`` inside a block scalar of Python code is code). Each comment is anchored to an *entry* (a
mapping key or a list item) by its source path: a comment block above an entry belongs to it, a
comment at the end of a line belongs to the last entry that starts on that line. The migration
keeps, for each container it builds, which source entry each of its entries came from
(:class:`Origins`), so the emitter can put a comment back next to the construct it described,
wherever the construct moved.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, TypeVar

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from noetl.dsl.errors import Problem
from noetl.dsl.yamlload import Path, _Loader, _measure

_T = TypeVar("_T")

END: Path = ("<end>",)


class Origins:
    """Container → {key or index → source path}; plus which containers were written in flow style.

    Containers are tracked by identity (every one registered is kept alive, so an id is never
    reused while the migration runs).
    """

    def __init__(self) -> None:
        self._map: dict[int, dict[Any, Path]] = {}
        self._keep: list[Any] = []
        self.flow: set[int] = set()

    def set(self, container: Any, key: Any, path: Path | None) -> None:
        if path is None:
            self._map.get(id(container), {}).pop(key, None)
            return
        if id(container) not in self._map:
            self._map[id(container)] = {}
            self._keep.append(container)
        self._map[id(container)][key] = path

    def get(self, container: Any, key: Any) -> Path | None:
        return self._map.get(id(container), {}).get(key)

    def mark_flow(self, container: _T) -> _T:
        self.flow.add(id(container))
        self._keep.append(container)
        return container

    def copy(self, new: Any, old: Any, mapping: dict[Any, Any] | None = None) -> None:
        """``new`` inherits ``old``'s origins, keys renamed through ``mapping`` (old → new)."""
        for key, path in self._map.get(id(old), {}).items():
            self.set(new, (mapping or {}).get(key, key), path)
        if id(old) in self.flow:
            self.mark_flow(new)


@dataclass
class Source:
    data: Any
    origins: Origins
    lines: dict[Path, int] = field(default_factory=dict)  # entry path → 1-based line
    before: dict[Path, list[tuple[int, str]]] = field(default_factory=dict)  # (line, text) above
    after: dict[Path, tuple[int, str]] = field(default_factory=dict)  # trailing comment
    problems: list[Problem] = field(default_factory=list)


class _Builder:
    def __init__(self, loader: _Loader) -> None:
        self.loader = loader
        self.origins = Origins()
        self.entries: list[tuple[int, int, int, Path]] = []  # (line0, col, depth, path)
        self.spans: list[tuple[tuple[int, int], tuple[int, int]]] = []

    def scalar(self, node: ScalarNode) -> Any:
        self.spans.append(
            ((node.start_mark.line, node.start_mark.column), (node.end_mark.line, node.end_mark.column))
        )
        return self.loader.construct_object(node, deep=True)

    def build(self, node: Node, path: Path) -> Any:
        if isinstance(node, ScalarNode):
            return self.scalar(node)
        if isinstance(node, SequenceNode):
            items: list[Any] = []
            if node.flow_style:
                self.origins.mark_flow(items)
            for i, item in enumerate(node.value):
                here = (*path, i)
                self.entries.append((item.start_mark.line, item.start_mark.column, len(here), here))
                self.origins.set(items, i, here)
                items.append(self.build(item, here))
            return items
        if isinstance(node, MappingNode):
            out: dict[str, Any] = {}
            if node.flow_style:
                self.origins.mark_flow(out)
            for key_node, value_node in node.value:
                key = self.scalar(key_node) if isinstance(key_node, ScalarNode) else str(key_node.value)
                key = key if isinstance(key, str) else str(key_node.value)
                here = (*path, key)
                self.entries.append((key_node.start_mark.line, key_node.start_mark.column, len(here), here))
                self.origins.set(out, key, here)
                out[key] = self.build(value_node, here)
            return out
        raise yaml.YAMLError(f"unsupported YAML node {type(node).__name__}")


def _comment_start(line: str, n: int, spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> int | None:
    col = line.find("#")
    while col != -1:
        outside = not any(start < (n, col) < end for start, end in spans)
        if (col == 0 or line[col - 1] in " \t") and outside:
            return col
        col = line.find("#", col + 1)
    return None


def _attach(src: Source, b: _Builder, text: str) -> None:
    entries = sorted(b.entries)
    starts = [(e[0], e[1]) for e in entries]
    block: list[tuple[int, str]] = []
    for n, line in enumerate(text.splitlines()):
        col = _comment_start(line, n, b.spans) if "#" in line else None
        if col is None:
            continue
        comment = line[col:].rstrip()
        if not line[:col].strip():
            block.append((n + 1, comment))
            continue
        at = bisect.bisect_right(starts, (n, 1 << 30)) - 1
        if at >= 0:
            same = [e for e in entries if e[0] == entries[at][0]]
            src.after[max(same, key=lambda e: (e[1], e[2]))[3]] = (n + 1, comment)
    for line_no, comment in block:
        at = bisect.bisect_left(starts, (line_no, 0))
        anchor = entries[at][3] if at < len(entries) else END
        src.before.setdefault(anchor, []).append((line_no, comment))


def load_source(text: str, file: str) -> Source:
    """The document (a mapping, a list of steps or one step) with origins and comments."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return Source(None, Origins(), problems=[Problem(file, 1, "", "the document is empty")])
        _measure(loader, root)
        b = _Builder(loader)
        data = b.build(root, ())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        return Source(
            None, Origins(), problems=[Problem(file, line, "", f"invalid YAML: {e}".splitlines()[0])]
        )
    except Exception as e:  # yamlload's own refusals (alias bombs, recursion, nesting)
        line = getattr(e, "line", 1)
        return Source(None, Origins(), problems=[Problem(file, line, "", str(e))])
    finally:
        loader.dispose()
    src = Source(data, b.origins, lines={p: line + 1 for line, _, _, p in b.entries})
    _attach(src, b, text)
    return src
