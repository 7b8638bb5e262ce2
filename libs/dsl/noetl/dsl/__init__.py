"""The NoETL playbook DSL: load, validate and normalize playbooks (no I/O beyond reading a file).

validate_text(text, file)  -> list[Problem]        every problem, for `noetl validate`
load_playbook(text, file)  -> model.Playbook       raises PlaybookInvalidError
load_playbook_file(path)   -> model.Playbook
"""

from noetl.dsl.validate import load_playbook, load_playbook_file, validate_text

__all__ = ["load_playbook", "load_playbook_file", "validate_text"]
