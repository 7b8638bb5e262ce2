"""Rewriting names inside templates without touching anything else in them.

Jinja has no unparser, so templates are rewritten as text: inside ``{{ }}`` and ``{% %}``, outside
string literals, a name in name position (not after ``.``, ``|`` or ``is``, not a keyword
argument) is renamed when it, or it followed by its attribute chain, is a key of the rename map
(``vars`` → ``ctx``, ``_retry.index`` → ``_attempt``, ``endpoint`` → ``iter.endpoint``). Event
names compared with ``event.name`` are rewritten first, by a function that says what a legacy
event becomes where the template now runs (an arc, a task rule).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar, overload

_T = TypeVar("_T")

_REGION = re.compile(r"\{\{.*?\}\}|\{%.*?%\}", re.S)
_TOKEN = re.compile(
    r"""(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>.)""", re.S
)
_EVENT_TEST = re.compile(r"""\bevent\.name\s*(==|!=)\s*(['"])([\w.]+)\2""")
_KEYWORDS = frozenset(
    {
        "and",
        "or",
        "not",
        "in",
        "is",
        "if",
        "else",
        "elif",
        "endif",
        "for",
        "endfor",
        "set",
        "endset",
        "true",
        "false",
        "none",
        "True",
        "False",
        "None",
        "loop",
        "recursive",
        "with",
        "without",
        "context",
        "import",
        "from",
        "as",
        "macro",
        "endmacro",
        "call",
        "endcall",
        "filter",
        "endfilter",
        "block",
        "endblock",
        "extends",
        "include",
        "raw",
        "endraw",
    }
)

# event name → the replacement expression for `event.name == '<name>'` (None: leave it)
EventMap = Callable[[str], str | None]


def _negate(expr: str) -> str:
    if expr == "true":
        return "false"
    if expr == "false":
        return "true"
    if " in [" in expr and " not in [" not in expr:
        return expr.replace(" in [", " not in [", 1)
    if "==" in expr:
        return expr.replace("==", "!=", 1)
    return f"not ({expr})"


def _events(region: str, events: EventMap | None) -> str:
    if events is None:
        return region

    def sub(m: re.Match[str]) -> str:
        repl = events(m.group(3))
        if repl is None:
            return m.group(0)
        return repl if m.group(1) == "==" else _negate(repl)

    out = _EVENT_TEST.sub(sub, region)
    if out != region:  # `true and x` is `x`: drop what the event test became when it always holds
        out = re.sub(r"\btrue and ", "", out)
        out = re.sub(r" and true\b", "", out)
    return out


def _names(region: str, renames: dict[str, str]) -> str:
    if not renames:
        return region
    tokens = [(m.lastgroup, m.group(0)) for m in _TOKEN.finditer(region)]
    out: list[str] = []
    prev = ""  # the previous significant token
    prev2 = ""
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        if (
            kind == "name"
            and prev not in (".", "|")
            and prev != "is"
            and not (prev == "not" and prev2 == "is")
        ):
            # the dotted chain that follows: name(.name)*
            chain = [text]
            j = i + 1
            while j + 1 < len(tokens) and tokens[j][1] == "." and tokens[j + 1][0] == "name":
                chain.append(tokens[j + 1][1])
                j += 2
            nxt = next((t for k, t in tokens[j:] if not t.isspace()), "")
            is_kwarg = nxt == "=" and "".join(t for _, t in tokens[j : j + 3]).lstrip()[:2] != "=="
            if text not in _KEYWORDS and not is_kwarg:
                for n in range(len(chain), 0, -1):
                    key = ".".join(chain[:n])
                    if key in renames:
                        out.append(renames[key])
                        i += 1 + 2 * (n - 1)
                        prev2, prev = prev, chain[n - 1]
                        break
                else:
                    out.append(text)
                    i += 1
                    prev2, prev = prev, text
                continue
        out.append(text)
        i += 1
        if not text.isspace():
            prev2, prev = prev, text
    return "".join(out)


def rewrite(text: str, renames: dict[str, str], events: EventMap | None = None) -> str:
    """``text`` with its template regions rewritten (text outside them is kept as is)."""
    if "{{" not in text and "{%" not in text:
        return text
    return _REGION.sub(lambda m: _names(_events(m.group(0), events), renames), text)


@overload
def rewrite_all(value: str, renames: dict[str, str], events: EventMap | None = None) -> str: ...
@overload
def rewrite_all(value: _T, renames: dict[str, str], events: EventMap | None = None) -> _T: ...
def rewrite_all(value: object, renames: dict[str, str], events: EventMap | None = None) -> object:
    """Every string inside ``value`` rewritten; containers are changed in place and returned (so
    the result has the type of ``value``: the overloads say so)."""
    if isinstance(value, str):
        return rewrite(value, renames, events)
    if isinstance(value, dict):
        for k in list(value):
            value[k] = rewrite_all(value[k], renames, events)
    elif isinstance(value, list):
        for n, item in enumerate(value):
            value[n] = rewrite_all(item, renames, events)
    return value


def wrap(expr: str) -> str:
    """``expr`` as a template (``{{ expr }}``), unless it already is one."""
    text = expr.strip()
    return text if text.startswith("{{") and text.endswith("}}") else "{{ " + text + " }}"


def inner(template: str) -> str:
    """The expression of ``{{ expr }}`` (the text itself otherwise)."""
    text = template.strip()
    if text.startswith("{{") and text.endswith("}}") and text.count("{{") == 1:
        return text[2:-2].strip()
    return text
