"""Splitting a PostgreSQL script into statements, for the postgres kind's "last statement's
rows" rule.

PostgreSQL's extended protocol (the one that returns column names and binds ``$n``) takes one
statement at a time, so a multi-statement task string is split here. The lexer knows what can
hide a ``;``: quoted strings ('' doubling, ``E'..'`` backslash escapes), quoted identifiers,
dollar quoting (``$fn$ ... $fn$``), ``--`` comments and nested ``/* */`` comments. It does not
know SQL-standard function bodies (``BEGIN ATOMIC ... END``): give such a ``CREATE FUNCTION``
a task of its own (a single statement is never split).
"""

from __future__ import annotations

import re

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$")
_IDENT_CHAR = re.compile(r"[A-Za-z0-9_$\u0080-\uffff]")


def split_statements(sql: str) -> list[str]:
    """The statements of ``sql`` in order, stripped, without empty ones or their ``;``."""
    out: list[str] = []
    start = i = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        if c == ";":
            out.append(sql[start:i])
            start = i = i + 1
        elif c == "'":
            escaped = i > 0 and sql[i - 1] in "eE" and (i < 2 or not _IDENT_CHAR.match(sql[i - 2]))
            i = _end_of_quoted(sql, i, "'", backslash=escaped)
        elif c == '"':
            i = _end_of_quoted(sql, i, '"', backslash=False)
        elif c == "-" and sql.startswith("--", i):
            nl = sql.find("\n", i)
            i = n if nl < 0 else nl + 1
        elif c == "/" and sql.startswith("/*", i):
            i = _end_of_block_comment(sql, i)
        elif c == "$" and (i == 0 or not _IDENT_CHAR.match(sql[i - 1])):
            m = _DOLLAR_TAG.match(sql, i)
            if m:
                close = sql.find(m.group(0), m.end())
                i = n if close < 0 else close + len(m.group(0))
            else:
                i += 1
        else:
            i += 1
    out.append(sql[start:])
    return [s.strip() for s in out if _has_code(s)]


def _end_of_quoted(sql: str, i: int, quote: str, *, backslash: bool) -> int:
    j = i + 1
    n = len(sql)
    while j < n:
        c = sql[j]
        if backslash and c == "\\":
            j += 2
            continue
        if c == quote:
            if j + 1 < n and sql[j + 1] == quote:  # doubled quote inside
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _end_of_block_comment(sql: str, i: int) -> int:
    depth = 0
    n = len(sql)
    while i < n:
        if sql.startswith("/*", i):
            depth += 1
            i += 2
        elif sql.startswith("*/", i):
            depth -= 1
            i += 2
            if depth == 0:
                return i
        else:
            i += 1
    return n


def _has_code(statement: str) -> bool:
    """False for a piece that is only whitespace and comments (``select 1; -- done``)."""
    s = statement.strip()
    while s:
        if s.startswith("--"):
            nl = s.find("\n")
            s = "" if nl < 0 else s[nl + 1:].strip()
        elif s.startswith("/*"):
            s = s[_end_of_block_comment(s, 0):].strip()
        else:
            return True
    return False
