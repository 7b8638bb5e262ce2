"""The registry of task kinds that validation accepts, with the field model of each.

Validation must reject unknown kinds without importing the worker (the DSL library does no I/O
and has no heavy dependencies), so the names live here; the worker registers the executor of
each kind under the same name, and a test checks that the two lists agree. Each kind's fields are
a pydantic model (``task_models.py``); validation checks a task's fields against its kind's.
"""

from __future__ import annotations

from pydantic import BaseModel

from noetl.dsl.task_models import BUILTIN_MODELS

BUILTIN_KINDS: frozenset[str] = frozenset(BUILTIN_MODELS)

_extra: set[str] = set()
_models: dict[str, type[BaseModel]] = {}


def register_kind(name: str, model: type[BaseModel] | None = None) -> None:
    """Let a plug-in kind pass validation (call it before validating).

    ``model`` lists the kind's own fields (``name``, ``kind`` and ``spec`` are every task's), so a
    misspelt or missing field is reported like a built-in kind's; derive it from
    ``task_models.KindFields`` to declare field groups, spec knobs and hints too. Without a model
    the kind accepts any field.
    """
    if name in BUILTIN_KINDS:
        if model is not None:
            raise ValueError(f"{name!r} is a built-in kind with its own model: give the plug-in another name")
        return
    if model is not None and not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"the model of kind {name!r} must be a pydantic BaseModel class, got {model!r}")
    _extra.add(name)
    if model is None:
        _models.pop(name, None)
    else:
        _models[name] = model


def known_kinds() -> frozenset[str]:
    return BUILTIN_KINDS | frozenset(_extra)


def kind_model(name: object) -> type[BaseModel] | None:
    """The field model of a kind; None for an unknown kind or a plug-in kind without one."""
    if not isinstance(name, str):
        return None
    if name in BUILTIN_MODELS:
        return BUILTIN_MODELS[name]
    return _models.get(name) if name in _extra else None


def plugin_models() -> dict[str, type[BaseModel]]:
    """The plug-in kinds that declared a model, for the JSON Schema."""
    return {name: model for name, model in sorted(_models.items()) if name in _extra}
