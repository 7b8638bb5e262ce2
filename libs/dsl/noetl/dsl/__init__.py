"""The NoETL playbook DSL: load, validate and normalize playbooks (no I/O beyond reading a file).

validate_text(text, file)  -> list[Problem]        every problem, for `noetl validate`
load_playbook(text, file)  -> model.Playbook       raises PlaybookInvalidError
load_playbook_file(path)   -> model.Playbook

The three are imported from ``noetl.dsl.validate`` when first asked for: importing a submodule
(``noetl.dsl.errors``, which every settings read needs) would otherwise build all of the
validator's checks and pydantic models, ~150 ms that a process which never validates a
playbook (a nats-server helper, ``noetl --help``) should not pay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from noetl.dsl.validate import load_playbook, load_playbook_file, validate_text

__all__ = ["load_playbook", "load_playbook_file", "validate_text"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from noetl.dsl import validate

        return getattr(validate, name)
    raise AttributeError(f"module 'noetl.dsl' has no attribute {name!r}")
