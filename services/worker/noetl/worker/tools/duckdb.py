"""``duckdb``: SQL on an in-process DuckDB, answered as ``{rows, columns, rowcount}``.

``spec.database`` (or the task's ``database`` field) is a file path; without one each task
gets a fresh in-memory database. A file database is opened once per worker and each task uses
its own cursor on it, so tasks of one worker share its tables and can run at the same time.
Queries run on a small thread pool of their own: a long scan must not occupy the loop's default
executor, which also resolves host names for the http and postgres kinds. On a time-out
(``spec.timeout``, a number or ``{read: n}``) the query is interrupted.

``params``: a mapping for ``$name`` (each statement gets the names it uses) or a list for ``?``
and ``$1..$n``. Several ``;``-separated statements run in order and the last one's rows are the
result. Values are made JSON-safe like the postgres kind's; ``TIMESTAMP WITH TIME ZONE`` values
of a final ``SELECT`` come back as ISO 8601 strings in UTC (DuckDB's own conversion of them
needs the optional ``pytz`` package; without it a non-SELECT statement returning them, such as
``INSERT ... RETURNING``, fails with a message saying so). ``rowcount`` is DuckDB's count of
changed rows for DML, else the number of rows returned.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import duckdb

from noetl.dsl.errors import DuckdbError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds
from noetl.worker.tools.values import json_safe

MEMORY = ":memory:"


class DuckdbServices:
    """File databases kept open for the worker's life, and the threads queries run on."""

    def __init__(self, max_threads: int = 4) -> None:
        self._max_threads = max_threads
        self._executor: ThreadPoolExecutor | None = None
        self._files: dict[str, duckdb.DuckDBPyConnection] = {}
        self._lock = threading.Lock()

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self._max_threads, thread_name_prefix="noetl-duckdb")
            return self._executor

    def cursor(self, database: str) -> duckdb.DuckDBPyConnection:
        if database == MEMORY:
            return duckdb.connect(MEMORY)
        with self._lock:
            base = self._files.get(database)
            if base is None:
                base = self._files[database] = duckdb.connect(database)
            return base.cursor()

    def close(self) -> None:
        with self._lock:
            files, self._files = self._files, {}
            executor, self._executor = self._executor, None
        for conn in files.values():
            conn.close()
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)


_default = DuckdbServices()


def close() -> None:
    """Close the module's file databases and threads (worker shutdown)."""
    _default.close()


def _services(ctx: ToolContext) -> DuckdbServices:
    services = ctx.services
    found = services.get("duckdb") if isinstance(services, Mapping) else getattr(services, "duckdb", None)
    return found if isinstance(found, DuckdbServices) else _default


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _fetch_relation(rel: duckdb.DuckDBPyRelation) -> dict[str, Any]:
    columns = list(rel.columns)
    types = [str(t) for t in rel.types]
    as_json: set[int] = set()
    if any("TIME ZONE" in t for t in types):
        exprs = []
        for i, (name, t) in enumerate(zip(columns, types, strict=True)):
            col = _quote(name)
            if t == "TIMESTAMP WITH TIME ZONE":
                exprs.append(f"strftime(timezone('UTC', {col}), '%Y-%m-%dT%H:%M:%S.%f') || '+00:00' AS {col}")
            elif "TIME ZONE" in t:
                exprs.append(f"CAST(to_json({col}) AS VARCHAR) AS {col}")
                as_json.add(i)
            else:
                exprs.append(col)
        rel = rel.project(", ".join(exprs))
    rows = []
    for record in rel.fetchall():
        values = [json.loads(v) if i in as_json and v is not None else v for i, v in enumerate(record)]
        rows.append({c: json_safe(v) for c, v in zip(columns, values, strict=True)})
    return {"rows": rows, "columns": columns, "rowcount": len(rows)}


def _fetch_cursor(cur: duckdb.DuckDBPyConnection) -> dict[str, Any]:
    columns = [d[0] for d in cur.description or []]
    try:
        records = cur.fetchall() if columns else []
    except duckdb.InvalidInputException as exc:
        if "pytz" in str(exc):
            raise duckdb.InvalidInputException(
                "TIMESTAMP WITH TIME ZONE values need the pytz package here; cast them to VARCHAR or "
                "TIMESTAMP, or select them in a final SELECT") from None
        raise
    rows = [{c: json_safe(v) for c, v in zip(columns, r, strict=True)} for r in records]
    changed = cur.rowcount
    return {"rows": rows, "columns": columns, "rowcount": changed if changed >= 0 else len(rows)}


def _named(statement: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: params[k] for k in statement.named_parameters if k in params}


def run_sql(cur: duckdb.DuckDBPyConnection, sql: str, params: Mapping[str, Any] | list[Any] | None,
            ) -> dict[str, Any]:
    """Run ``sql`` on ``cur`` (in the calling thread) and return the last statement's result."""
    statements = cur.extract_statements(sql)
    if not statements:
        raise duckdb.InvalidInputException("no SQL statement to run")
    *head, last = statements
    if isinstance(params, list) and params and head:
        cur.execute(sql, params)  # positional parameters number across the whole script
        return _fetch_cursor(cur)
    for st in head:
        cur.execute(st.query, _named(st, params) if isinstance(params, Mapping) else None)
    bound: Any = _named(last, params) if isinstance(params, Mapping) else (params or None)
    if last.type == duckdb.StatementType.SELECT:
        rel = cur.sql(last.query, params=bound or None)
        if rel is not None:
            return _fetch_relation(rel)
        return {"rows": [], "columns": [], "rowcount": 0}
    cur.execute(last.query, bound or None)
    return _fetch_cursor(cur)


def _interrupt(holder: dict[str, duckdb.DuckDBPyConnection]) -> None:
    cur = holder.get("cur")
    if cur is not None:
        try:
            cur.interrupt()
        except duckdb.Error:  # already closed: the query ended meanwhile
            pass


class DuckdbTool:
    kind = "duckdb"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        sql = config.get("query") if config.get("query") is not None else config.get("command")
        if not isinstance(sql, str) or not sql.strip():
            return error(ToolError("duckdb task needs SQL in `query` or `command`"))
        params = config.get("params")
        if params is not None and not isinstance(params, Mapping | list | tuple):
            return error(ToolError("duckdb `params` must be a mapping ($name) or a list (? or $n)"))
        if isinstance(params, tuple):
            params = list(params)
        database = str(config.get("database") or ctx.spec.get("database") or MEMORY)
        services = _services(ctx)
        holder: dict[str, duckdb.DuckDBPyConnection] = {}

        def work() -> dict[str, Any]:
            cur = holder["cur"] = services.cursor(database)
            try:
                return run_sql(cur, sql, params)
            finally:
                cur.close()

        _, read = timeout_seconds(ctx.spec)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(read):
                result = await loop.run_in_executor(services.executor(), work)
        except TimeoutError:
            _interrupt(holder)
            return error(TimeoutError_(f"duckdb query did not finish within {read:g} s"))
        except asyncio.CancelledError:
            _interrupt(holder)
            raise
        except duckdb.Error as exc:
            return error(DuckdbError(f"{type(exc).__name__}: {exc}", retryable=False))
        return ok(result)


register(DuckdbTool())
