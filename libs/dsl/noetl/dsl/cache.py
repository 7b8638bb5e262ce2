"""Parsed playbooks and their template engines, cached by content digest.

Parsing and compiling templates costs far more than deciding (~300 µs per template compile), so
each distinct playbook text is parsed once per process. The cache is keyed by content, so it
can never serve a stale playbook, and it stays pure: same text in, same object out.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict

from noetl.dsl import load_playbook
from noetl.dsl.model import Playbook
from noetl.dsl.templates import TemplateEngine

_MAX = 256
_playbooks: OrderedDict[str, Playbook] = OrderedDict()
_engines: dict[str, TemplateEngine] = {}


def digest_of(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def parse_playbook(text: str, file: str = "<playbook>") -> Playbook:
    d = digest_of(text)
    pb = _playbooks.get(d)
    if pb is None:
        pb = load_playbook(text, file)
        _playbooks[d] = pb
        if len(_playbooks) > _MAX:
            old, _ = _playbooks.popitem(last=False)
            _engines.pop(old, None)
    else:
        _playbooks.move_to_end(d)
    return pb


def template_engine(playbook: Playbook) -> TemplateEngine:
    eng = _engines.get(playbook.digest)
    if eng is None:
        eng = _engines[playbook.digest] = TemplateEngine()
    return eng
