"""YAML loading that remembers where every value came from.

Validation messages must name the line of the offending construct, and ``yaml.safe_load``
forgets positions. So the document is composed into a node graph (``SafeLoader`` composition,
which keeps marks) and built into plain Python values here, recording the line of every mapping
key and sequence item under its path (``("workflow", 2, "tool", 0)``).

Building by hand also lets us refuse what a playbook never needs and a hostile file could
abuse: alias bombs (a few lines expanding to billions of nodes), recursive aliases, absurd
nesting, duplicate keys (YAML silently keeps the last one, hiding a typo such as two ``tool:``),
and tags that are not plain mappings, lists or scalars.

Two deliberate departures from YAML 1.1 defaults, both because a playbook's values travel as
JSON (events, commands, payloads): timestamps stay strings (``2024-01-01`` is not turned into a
``date``), and mapping keys are always strings, spelled as written (``200:`` is ``"200"``,
``on:`` is ``"on"``, not ``True``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from noetl.dsl.errors import NoetlError, Problem

Path = tuple[str | int, ...]

MAX_NODES = 200_000  # expanded size: far above any real playbook, far below an alias bomb
MAX_DEPTH = 100  # nesting levels; the composer itself recurses, so keep well below the stack
_MAP_TAG = "tag:yaml.org,2002:map"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_SIMPLE_KEY = re.compile(r"^[\w-]+$")


# libyaml's parser when PyYAML was built with it: ~10x faster on a first-seen playbook; same
# nodes, marks and resolver (the resolver stays in Python, so the timestamp override holds)
_Base: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc]
    """SafeLoader without implicit timestamps (see the module docstring)."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != _TIMESTAMP_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def fmt_path(path: Path) -> str:
    """``("workflow", 2, "tool", 0, "spec")`` → ``workflow[2].tool[0].spec``."""
    out: list[str] = []
    for seg in path:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif _SIMPLE_KEY.match(seg):
            out.append(f".{seg}" if out else seg)
        else:
            out.append(f"[{json.dumps(seg)}]")
    return "".join(out)


@dataclass
class LineMap:
    """Path → 1-based line, with aliases for normalized paths.

    A task written in the labelled form (``- fetch: {kind: http}``) lives at
    ``workflow[0].tool[0].fetch`` in the file but is reported as ``workflow[0].tool[0]``;
    ``alias`` records that translation so any normalized path still finds its line. A path with no
    line of its own (a missing key) gets the line of its nearest ancestor.
    """

    lines: dict[Path, int] = field(default_factory=dict)
    aliases: dict[Path, Path] = field(default_factory=dict)

    def set(self, path: Path, line: int) -> None:
        self.lines.setdefault(path, line)

    def alias(self, shown: Path, raw: Path) -> None:
        if shown != raw:
            self.aliases[shown] = raw

    def line(self, path: Path) -> int:
        for n in range(len(path), 0, -1):
            raw = self.aliases.get(path[:n])
            if raw is not None:
                path = raw + path[n:]
                break
        while path:
            found = self.lines.get(path)
            if found is not None:
                return found
            path = path[:-1]
        return self.lines.get((), 1)


@dataclass
class LoadedYaml:
    data: Any
    lines: LineMap
    problems: list[Problem]


class _LoadError(NoetlError):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def _line(node: Node) -> int:
    return node.start_mark.line + 1


def _check_duplicate_keys(node: MappingNode) -> None:
    """Duplicates among the keys written in this mapping (merged ``<<`` keys may be overridden)."""
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        if key_node.value in seen:
            raise _LoadError(
                _line(key_node),
                f"duplicate key {key_node.value!r} (first at line "
                f"{seen[key_node.value]}): YAML keeps only the last one, "
                "so remove or rename one of them",
            )
        seen[key_node.value] = _line(key_node)


def _measure(loader: _Loader, root: Node) -> None:
    """Reject recursion, deep nesting and alias bombs before anything is expanded.

    Sizes are memoized per node, so a bomb is measured in time linear in its text while its
    expanded size is counted exactly.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def visit(node: Node, depth: int) -> int:
        nid = id(node)
        if nid in sizes:
            return sizes[nid]
        if nid in active:
            raise _LoadError(_line(node), "an alias refers to a node that contains it (recursive YAML)")
        if depth > MAX_DEPTH:
            raise _LoadError(_line(node), f"the document nests deeper than {MAX_DEPTH} levels")
        active.add(nid)
        total = 1
        if isinstance(node, MappingNode):
            _check_duplicate_keys(node)
            loader.flatten_mapping(node)
            for key_node, value_node in node.value:
                total += visit(key_node, depth + 1) + visit(value_node, depth + 1)
        elif isinstance(node, SequenceNode):
            for item in node.value:
                total += visit(item, depth + 1)
        active.discard(nid)
        sizes[nid] = total
        if total > MAX_NODES:
            raise _LoadError(
                _line(node),
                f"the document expands to more than {MAX_NODES} values (aliases repeated many times?)",
            )
        return total

    visit(root, 0)


def _scalar(loader: _Loader, node: ScalarNode) -> Any:
    try:
        return loader.construct_object(node, deep=True)
    except yaml.YAMLError:
        raise
    except Exception as e:  # PyYAML's own constructors fail this way on e.g. an empty `!!int`
        raise _LoadError(_line(node), f"{node.value!r} cannot be read as {node.tag}") from e


def _key(loader: _Loader, node: Node) -> str:
    if not isinstance(node, ScalarNode):
        raise _LoadError(_line(node), "a mapping key must be a plain scalar, not a list or mapping")
    value = _scalar(loader, node)
    return value if isinstance(value, str) else str(node.value)


def _build(loader: _Loader, node: Node, path: Path, lines: LineMap) -> Any:
    if isinstance(node, ScalarNode):
        return _scalar(loader, node)
    if isinstance(node, SequenceNode):
        if node.tag != _SEQ_TAG:
            raise _LoadError(_line(node), f"unsupported YAML tag {node.tag!r}: use a plain list")
        items: list[Any] = []
        for i, item in enumerate(node.value):
            lines.set((*path, i), _line(item))
            items.append(_build(loader, item, (*path, i), lines))
        return items
    if isinstance(node, MappingNode):
        if node.tag != _MAP_TAG:
            raise _LoadError(_line(node), f"unsupported YAML tag {node.tag!r}: use a plain mapping")
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = _key(loader, key_node)
            lines.set((*path, key), _line(key_node))
            out[key] = _build(loader, value_node, (*path, key), lines)
        return out
    raise _LoadError(_line(node), f"unsupported YAML node {type(node).__name__}")


def _yaml_problem(file: str, text: str, err: yaml.YAMLError) -> Problem:
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    if mark is not None:
        line = mark.line + 1
    elif isinstance(err, yaml.reader.ReaderError):
        line = text.count("\n", 0, max(err.position, 0)) + 1
    else:
        line = 1
    line = min(line, max(1, len(text.splitlines())))  # "<stream end>" sits past the last line
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    context_mark = getattr(err, "context_mark", None)
    if context and context_mark is not None and context_mark.line + 1 != line:
        context = f"{context} that starts at line {context_mark.line + 1}"
    detail = f"{what} ({context})" if context else what
    return Problem(file, line, "", f"line {line}: invalid YAML: {detail}")


def _compose_and_build(text: str, lines: LineMap) -> tuple[Any, int]:
    """The document's value and the line it starts on; raises YAML and load errors."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise _LoadError(
                1,
                "the document is empty: a playbook is a mapping with apiVersion, kind, metadata and workflow",
            )
        _measure(loader, root)
        lines.set((), _line(root))
        return _build(loader, root, (), lines), _line(root)
    finally:
        loader.dispose()


def load_yaml(text: str, file: str = "<playbook>") -> LoadedYaml:
    """Parse ``text``; on any problem ``data`` is None and ``problems`` says where and why."""
    lines = LineMap()
    try:
        data, first_line = _compose_and_build(text, lines)
    except yaml.YAMLError as e:
        return LoadedYaml(None, lines, [_yaml_problem(file, text, e)])
    except _LoadError as e:
        return LoadedYaml(None, lines, [Problem(file, e.line, "", f"line {e.line}: {e.message}")])
    except RecursionError:
        return LoadedYaml(
            None, lines, [Problem(file, 1, "", "line 1: the document nests too deeply to read")]
        )
    if not isinstance(data, dict):
        found = "a list" if isinstance(data, list) else f"the scalar {data!r}"[:80]
        return LoadedYaml(
            None,
            lines,
            [
                Problem(
                    file,
                    first_line,
                    "",
                    f"line {first_line}: a playbook is a "
                    f"mapping (apiVersion, kind, metadata, workflow, ...), found {found}",
                )
            ],
        )
    return LoadedYaml(data, lines, [])
