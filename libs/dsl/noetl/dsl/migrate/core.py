"""The migration's shared state: notes, origins, and a step's pipeline as an editable list."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from noetl.dsl.migrate.source import Origins, Source
from noetl.dsl.yamlload import Path, fmt_path

_T = TypeVar("_T")


@dataclass(frozen=True)
class Note:
    """One thing the migration did, or could not do, at a place in the source."""

    file: str
    line: int
    path: str
    message: str
    untranslated: bool = False

    def __str__(self) -> str:
        what = "not translated" if self.untranslated else "rewrote"
        return f"{self.file}:{self.line}: {self.path or '<root>'}: {what}: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "path": self.path,
            "message": self.message,
            "untranslated": self.untranslated,
        }


@dataclass
class Migrator:
    src: Source
    file: str
    notes: list[Note] = field(default_factory=list)
    var_renames: dict[str, str] = field(default_factory=lambda: {"vars": "ctx"})
    sugar: bool = False  # emit choose/while/until where they say it shorter (`noetl migrate --sugar`)

    @property
    def o(self) -> Origins:
        return self.src.origins

    def line(self, path: Path | None) -> int:
        while path:
            if path in self.src.lines:
                return self.src.lines[path]
            path = path[:-1]
        return 1

    def did(self, path: Path | None, message: str) -> None:
        self.notes.append(Note(self.file, self.line(path), fmt_path(path or ()), message))

    def cannot(self, path: Path | None, message: str) -> None:
        self.notes.append(Note(self.file, self.line(path), fmt_path(path or ()), message, untranslated=True))

    def origin(self, container: Any, key: Any) -> Path | None:
        return self.o.get(container, key)

    def put(self, container: dict[str, Any] | list[Any], key: Any, value: Any, origin: Path | None) -> Any:
        """Set ``container[key]`` (append for a list and ``key is None``), remembering ``origin``."""
        if isinstance(container, list) and key is None:
            container.append(value)
            key = len(container) - 1
        else:
            container[key] = value
        self.o.set(container, key, origin)
        return value

    def flow(self, value: _T) -> _T:
        return self.o.mark_flow(value)

    def reorder(self, mapping: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
        """The same entries in ``order`` (others after, as they were), origins kept."""
        out: dict[str, Any] = {}
        for key in [*[k for k in order if k in mapping], *[k for k in mapping if k not in order]]:
            out[key] = mapping[key]
        self.o.copy(out, mapping)
        return out


class Pipeline:
    """A step's `tool`, in whichever shape it was written, editable as a list of tasks.

    Inserting a task shifts the position-based labels of unnamed tasks (`task_1`...), so before
    the first insertion every task gets its current label written out, and jumps keep working.
    """

    def __init__(self, m: Migrator, step: dict[str, Any]) -> None:
        self.m = m
        self.step = step
        self.name = str(step.get("step") or "step")

    @property
    def items(self) -> list[Any]:
        tool = self.step.get("tool")
        return tool if isinstance(tool, list) else [tool] if isinstance(tool, dict) else []

    def bodies(self) -> list[tuple[str, dict[str, Any]]]:
        """(label, task mapping) for each task (the inner mapping of a labelled item)."""
        tool = self.step.get("tool")
        if isinstance(tool, dict):
            return [(str(tool.get("name") or f"{self.name}_task"), tool)]
        out: list[tuple[str, dict[str, Any]]] = []
        for j, item in enumerate(tool if isinstance(tool, list) else []):
            if not isinstance(item, dict):
                continue
            if "kind" not in item and len(item) == 1 and isinstance(next(iter(item.values())), dict):
                ((label, body),) = item.items()
                out.append((str(label), body))
            else:
                out.append((str(item.get("name") or f"task_{j}"), item))
        return out

    def labels(self) -> list[str]:
        return [label for label, _ in self.bodies()]

    def unique(self, base: str) -> str:
        taken = set(self.labels())
        label, n = base, 2
        while label in taken:
            label, n = f"{base}_{n}", n + 1
        return label

    def _as_list(self) -> list[Any]:
        tool = self.step.get("tool")
        if isinstance(tool, list):
            for j, item in enumerate(tool):
                plain = isinstance(item, dict) and ("kind" in item or len(item) != 1)
                if plain and "name" not in item:
                    rest = list(item.items())
                    item.clear()
                    item["name"] = f"task_{j}"
                    item.update(rest)
            return tool
        new: list[Any] = []
        if isinstance(tool, dict):
            if "name" not in tool:
                rest = list(tool.items())
                tool.clear()
                tool["name"] = f"{self.name}_task"
                tool.update(rest)
            self.m.put(new, None, tool, self.m.origin(self.step, "tool"))
        self.step["tool"] = new
        return new

    def insert(self, index: int | None, task: dict[str, Any], origin: Path | None) -> None:
        tasks = self._as_list()
        if index is None:
            self.m.put(tasks, None, task, origin)
            return
        shifted = [self.m.origin(tasks, j) for j in range(len(tasks))]
        tasks.insert(index, task)
        for j, path in enumerate([*shifted[:index], origin, *shifted[index:]]):
            self.m.o.set(tasks, j, path)
