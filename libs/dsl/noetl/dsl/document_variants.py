"""The playbook document model that validation runs as its last net, built for the task kinds a
playbook uses.

The whole model (``noetl.dsl.document``) builds a task model and a template model for every
built-in kind, ~45 ms of a one-step ``noetl run`` that uses one kind. A task is checked by its
kind's model alone (the union is discriminated by ``kind``), so a model whose union holds only
the kinds the playbook names gives the same errors, word for word: every task finds its own
model, and a kind that is not there fails with the union's one custom message either way. So
the first playbook a process validates gets a copy of the module built for its kinds; the next
one whose kinds are not all in it gets the whole model, kept from then on (two builds at most).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from typing import Any

from pydantic import BaseModel

from noetl.dsl.task_models import BUILTIN_MODELS

_built: dict[frozenset[str], type[BaseModel]] = {}
_lock = threading.Lock()


def kinds_in(data: Any) -> frozenset[str]:
    """Every built-in kind named under a ``kind`` key anywhere in the document (a superset of
    its tasks' kinds: a keychain entry's kind may coincide, which costs only a model more)."""
    found: set[str] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            kind = node.get("kind")
            if isinstance(kind, str) and kind in BUILTIN_MODELS:
                found.add(kind)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return frozenset(found)


def document_model(data: Any) -> type[BaseModel]:
    """The model that checks ``data`` exactly as ``noetl.dsl.document.PlaybookDocument`` does."""
    needed = kinds_in(data)
    with _lock:
        for kinds, model in _built.items():
            if needed <= kinds:
                return model
        if _built or needed == frozenset(BUILTIN_MODELS):
            from noetl.dsl.document import PlaybookDocument

            _built[frozenset(BUILTIN_MODELS)] = PlaybookDocument
            return PlaybookDocument
        built: type[BaseModel] = _copy(needed).PlaybookDocument
        _built[needed] = built
        return built


def _copy(kinds: frozenset[str]) -> Any:
    """A fresh execution of ``noetl.dsl.document`` with ``SELECTED_KINDS`` set, registered under
    a name of its own (pydantic resolves the models' forward references through it)."""
    origin = importlib.util.find_spec("noetl.dsl.document")
    if origin is None or origin.origin is None:
        raise ImportError("noetl.dsl.document not found")
    name = f"noetl.dsl.document_for_{'_'.join(sorted(kinds)) or 'plugins'}"
    spec = importlib.util.spec_from_file_location(name, origin.origin)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {origin.origin}")
    module = importlib.util.module_from_spec(spec)
    module.SELECTED_KINDS = kinds  # type: ignore[attr-defined]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
