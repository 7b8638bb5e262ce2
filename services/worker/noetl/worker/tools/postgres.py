"""``postgres``: SQL against PostgreSQL through asyncpg, answered as ``{rows, columns, rowcount}``.

A worker keeps one connection pool per database (keyed by the resolved connection settings),
so tasks reuse connections; ``aclose()`` closes them all at shutdown. Pools belong to the event
loop that made them, like the HTTP client. A pool opens connections as tasks need them, up to
16, a worker's default concurrency: with 10, a worker running 16 postgres tasks at once kept six
of them waiting for a connection. Each pooled connection keeps the statements it prepared
(asyncpg's statement cache), so a loop prepares its SQL once per connection, not once per row.

How a task's SQL runs:

- with ``params`` (a list for ``$1..$n``): one statement, prepared, then executed;
- without: a single statement is prepared and executed the same way; a string of several
  ``;``-separated statements runs all but the last as one script (one implicit transaction,
  the simple protocol), then the last one prepared, whose rows are the result.

Parameters are coerced to the types PostgreSQL infers for the statement, because asyncpg is
strict (it refuses the string ``"1"`` for an ``int4``) while rendered templates often produce
strings: ``"1"`` → 1 for integers, numbers → text for text columns, ISO strings → dates and
timestamps, a string for ``json``/``jsonb`` is taken as JSON text when it parses (else as a
JSON string). json/jsonb columns come back parsed. A value that cannot be converted is an error
naming the parameter and the type, never the value.

``spec.timeout``: ``connect`` bounds getting a connection (default 10 s), ``read`` the
statements (default none).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import uuid
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlsplit

import asyncpg

from noetl.dsl.errors import KeychainUnresolvedError, NoetlError, PostgresError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds
from noetl.worker.tools.sqlsplit import split_statements
from noetl.worker.tools.values import json_safe

DEFAULT_CONNECT_TIMEOUT = 10.0
NO_PG: dict[str, Any] = {"code": None, "sqlstate": None}
# serialization failure, deadlock, server shutting down/starting, too many connections
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01", "57P01", "57P02", "57P03", "53300"})
_ALIASES = {"host": ("host", "db_host"), "port": ("port", "db_port"),
            "user": ("user", "username", "db_user"), "password": ("password", "db_password"),
            "database": ("database", "dbname", "db_name")}


class ConnectionSettings:
    """Where to connect, from a keychain entry's data or an inline mapping; never printed whole."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.dsn: str | None = data.get("dsn") or None
        self.kwargs: dict[str, Any] = {}
        if self.dsn is None:
            for name, aliases in _ALIASES.items():
                value = next((data[a] for a in aliases if data.get(a) not in (None, "")), None)
                if value is not None:
                    self.kwargs[name] = int(value) if name == "port" else str(value)
        self.key: tuple[Any, ...] = (self.dsn,) if self.dsn else tuple(sorted(self.kwargs.items()))

    def describe(self) -> str:
        """host:port/database, for messages (no user, no password)."""
        if self.dsn:
            try:
                parts = urlsplit(self.dsn)
                return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or ''}"
            except ValueError:
                return "<dsn>"
        k = self.kwargs
        return f"{k.get('host', 'localhost')}:{k.get('port', 5432)}/{k.get('database', '')}"


async def _init_connection(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog")


class PostgresServices:
    """The worker's pools, one per database, created on first use."""

    def __init__(self, max_size: int = 16) -> None:
        self.max_size = max_size
        self._pools: dict[tuple[Any, ...], asyncio.Future[asyncpg.Pool]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    async def pool(self, settings: ConnectionSettings, connect_timeout: float) -> asyncpg.Pool:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._pools, self._loop = {}, loop  # pools of another loop are unusable here
        future = self._pools.get(settings.key)
        if future is None or (future.done() and (future.cancelled() or future.exception())):
            future = loop.create_task(self._create(settings, connect_timeout))
            self._pools[settings.key] = future
        try:
            return await asyncio.shield(future)
        except BaseException:
            if self._pools.get(settings.key) is future and future.done():
                del self._pools[settings.key]  # let the next task try again
            raise

    async def _create(self, settings: ConnectionSettings, connect_timeout: float) -> asyncpg.Pool:
        return await asyncpg.create_pool(settings.dsn, min_size=1, max_size=self.max_size,
                                         init=_init_connection, timeout=connect_timeout, **settings.kwargs)

    async def aclose(self) -> None:
        pools, self._pools = self._pools, {}
        same_loop = self._loop is asyncio.get_running_loop()
        for future in pools.values():
            if not same_loop or not future.done() or future.cancelled() or future.exception():
                continue  # never created, or created on a loop that is gone
            pool = future.result()
            try:
                await asyncio.wait_for(pool.close(), 5)
            except (TimeoutError, OSError, asyncpg.PostgresError, asyncpg.InterfaceError):
                pool.terminate()


_default = PostgresServices()


async def aclose() -> None:
    """Close every pool of the module's shared services (worker shutdown)."""
    await _default.aclose()


def _services(ctx: ToolContext) -> PostgresServices:
    services = ctx.services
    found = services.get("postgres") if isinstance(services, Mapping) else getattr(services, "postgres", None)
    return found if isinstance(found, PostgresServices) else _default


class _RefusedError(NoetlError):
    def __init__(self, outcome: dict[str, Any]) -> None:
        super().__init__(outcome["error"]["message"])
        self.outcome = outcome


def _settings(auth: Any, ctx: ToolContext) -> ConnectionSettings:
    if isinstance(auth, str) and auth:
        data = ctx.keychain.get(auth)
        if data is None:
            raise _RefusedError(error(KeychainUnresolvedError(
                f"keychain entry '{auth}' is not resolved for postgres auth", entry=auth), pg=NO_PG))
        where = f"keychain entry '{auth}'"
    elif isinstance(auth, Mapping):
        data, where = auth, "inline auth"
    else:
        raise _RefusedError(error(ToolError(
            "postgres task needs `auth`: a keychain entry name or a mapping with `dsn` or "
            "`host`, `port`, `user`, `password`, `database`"), pg=NO_PG))
    if not isinstance(data, Mapping) or not (data.get("dsn") or data.get("host") or data.get("db_host")):
        raise _RefusedError(error(ToolError(f"{where}: postgres credentials need `dsn` or `host`"), pg=NO_PG))
    return ConnectionSettings(data)


# ---- parameters -----------------------------------------------------------------------------

_INTS = frozenset({"int2", "int4", "int8", "oid", "smallint", "integer", "bigint"})
_FLOATS = frozenset({"float4", "float8", "real", "double precision"})
_TEXTS = frozenset({"text", "varchar", "bpchar", "name", "char", "citext", "xml", "unknown"})
_TRUE = frozenset({"true", "t", "yes", "y", "on", "1"})
_FALSE = frozenset({"false", "f", "no", "n", "off", "0"})


def _coerce(value: Any, type_name: str, kind: str) -> Any:
    if value is None:
        return None
    if kind == "array" and isinstance(value, list | tuple):
        element = type_name[:-2] if type_name.endswith("[]") else type_name.lstrip("_")
        return [_coerce(v, element, "scalar") for v in value]
    if type_name in _INTS:
        if isinstance(value, str):
            return int(value.strip())
        if isinstance(value, bool):
            return int(value)
        if isinstance(value, float | Decimal) and value == int(value):
            return int(value)
        return value
    if type_name in _FLOATS:
        numeric = isinstance(value, str | int | Decimal) and not isinstance(value, bool)
        return float(value) if numeric else value
    if type_name == "numeric":
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return Decimal(str(value).strip())
        return value
    if type_name in _TEXTS:
        if isinstance(value, str):
            return value
        if isinstance(value, bool):
            return "true" if value else "false"
        return json.dumps(value) if isinstance(value, dict | list) else str(value)
    if type_name == "bool":
        if isinstance(value, str):
            low = value.strip().lower()
            if low in _TRUE or low in _FALSE:
                return low in _TRUE
            raise ValueError("not a boolean")
        return bool(value) if isinstance(value, int) else value
    if type_name in ("json", "jsonb"):
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError:
                return value
        return value
    if type_name == "date" and isinstance(value, str):
        return dt.date.fromisoformat(value.strip())
    if type_name in ("timestamp", "timestamptz"):
        if isinstance(value, str):
            return dt.datetime.fromisoformat(value.strip())
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime):
            return dt.datetime(value.year, value.month, value.day)
        return value
    if type_name in ("time", "timetz") and isinstance(value, str):
        return dt.time.fromisoformat(value.strip())
    if type_name == "uuid" and isinstance(value, str):
        return uuid.UUID(value.strip())
    if type_name == "bytea" and isinstance(value, str):
        return value.encode()
    if type_name == "interval" and isinstance(value, int | float) and not isinstance(value, bool):
        return dt.timedelta(seconds=value)
    return value


def coerce_params(params: list[Any], types: tuple[Any, ...]) -> list[Any]:
    """``params`` converted to the statement's parameter types (see the module docstring)."""
    if len(params) != len(types):
        raise _RefusedError(error(PostgresError(
            f"the statement has {len(types)} parameter(s) ($1..${len(types)}) but {len(params)} "
            "were given", retryable=False), pg=NO_PG))
    out = []
    for i, (value, t) in enumerate(zip(params, types, strict=True), start=1):
        try:
            out.append(_coerce(value, t.name, t.kind))
        except (ValueError, TypeError, InvalidOperation, OverflowError):
            raise _RefusedError(error(PostgresError(
                f"parameter ${i}: cannot convert a {type(value).__name__} value to {t.name}",
                retryable=False), pg=NO_PG)) from None
    return out


# ---- running --------------------------------------------------------------------------------

def _rowcount(status: str | None, rows: int) -> int:
    last = (status or "").rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else rows


async def _prepare(conn: Any, sql: str) -> Any:
    """``sql`` prepared through the connection's statement cache.

    A task needs the statement's parameter types before it runs (to coerce rendered strings),
    so it prepares explicitly; but the public ``prepare()`` bypasses asyncpg's statement cache,
    and a loop of INSERTs paid a Parse/Describe round trip (and a Close later) for every row on
    top of the Bind/Execute. ``_prepare(use_cache=True)`` is the path asyncpg's own ``fetch``
    and ``execute`` take: the cache is the connection's (kept across pool releases, sized by
    ``statement_cache_size``, 0 turns it off), so a statement is prepared once per pooled
    connection. It is private, hence the fallback to ``prepare()`` should it ever go."""
    cached = getattr(conn, "_prepare", None)
    if cached is not None:
        try:
            return await cached(sql, use_cache=True)
        except TypeError:  # another signature: the public path
            pass
    return await conn.prepare(sql)


# what a statement prepared before a schema change can get: its plan's result type changed
# (0A000, asyncpg's InvalidCachedStatementError), or its parameter types no longer fit (a column
# went from integer to text: "operator does not exist: text = integer", 42883; 42804; 42P08)
_STALE_PLAN_SQLSTATES = frozenset({"0A000", "42883", "42804", "42P08"})


async def _fetch(conn: Any, sql: str, params: list[Any] | None) -> tuple[Any, list[Any]]:
    """The statement and its records. When a cached statement fails in a way a schema change
    explains, the connection's caches are dropped and, outside a transaction, the statement is
    prepared afresh and run once more (asyncpg's own ``fetch`` does the same for the first
    kind): the failed run was a single statement that did not commit, so nothing is applied
    twice, and a task does not fail for a plan that a fresh ``prepare`` (what every task did
    before the cache) would not have."""
    for attempt in (1, 2):
        stmt = await _prepare(conn, sql)
        args = [] if params is None else coerce_params(params, stmt.get_parameters())
        try:
            return stmt, await stmt.fetch(*args)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate not in _STALE_PLAN_SQLSTATES or attempt == 2:
                raise
            await conn.reload_schema_state()
            if conn.is_in_transaction():
                raise
    raise AssertionError("unreachable")  # the second attempt returns or raises


async def _run_sql(conn: asyncpg.Connection, sql: str, params: list[Any] | None) -> dict[str, Any]:
    if params is None:
        try:
            stmt, records = await _fetch(conn, sql, None)
        except asyncpg.PostgresSyntaxError as exc:
            statements = split_statements(sql)
            if exc.sqlstate != "42601" or len(statements) < 2:
                raise
            await conn.execute(";\n".join(statements[:-1]))
            stmt, records = await _fetch(conn, statements[-1], None)
    else:
        stmt, records = await _fetch(conn, sql, params)
    columns = [a.name for a in stmt.get_attributes()]
    rows = [{k: json_safe(v) for k, v in r.items()} for r in records]
    return {"rows": rows, "columns": columns, "rowcount": _rowcount(stmt.get_statusmsg(), len(rows))}


def _pg_error(exc: asyncpg.PostgresError, prefix: str = "") -> dict[str, Any]:
    state = exc.sqlstate
    retryable = state in RETRYABLE_SQLSTATES or (state or "").startswith("08") or isinstance(
        exc, asyncpg.PostgresConnectionError)
    pg: dict[str, Any] = {"code": state, "sqlstate": state}
    for field in ("detail", "hint", "constraint_name", "table_name", "column_name"):
        value = getattr(exc, field, None)
        if value:
            pg[field.removesuffix("_name")] = value
    message = f"{prefix}{exc.args[0] if exc.args else exc} (SQLSTATE {state})"
    return error(PostgresError(message, retryable=retryable), pg=pg)


class PostgresTool:
    kind = "postgres"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        sql = config.get("query") if config.get("query") is not None else config.get("command")
        if not isinstance(sql, str) or not sql.strip():
            return error(ToolError("postgres task needs SQL in `query` or `command`"), pg=NO_PG)
        params = config.get("params")
        if params is not None and not isinstance(params, list | tuple):
            return error(ToolError("postgres `params` must be a list (for $1..$n)"), pg=NO_PG)
        try:
            settings = _settings(config.get("auth"), ctx)
        except _RefusedError as exc:
            return exc.outcome
        connect, read = timeout_seconds(ctx.spec)
        connect = DEFAULT_CONNECT_TIMEOUT if connect is None else connect
        where = settings.describe()
        try:
            pool = await _services(ctx).pool(settings, connect)
            conn = await pool.acquire(timeout=connect)
        except TimeoutError:
            return error(TimeoutError_(f"cannot connect to PostgreSQL at {where} within {connect:g} s"),
                         pg=NO_PG)
        except asyncpg.PostgresError as exc:
            return _pg_error(exc, f"cannot connect to PostgreSQL at {where}: ")
        except (OSError, asyncpg.InterfaceError) as exc:
            return error(PostgresError(f"cannot connect to PostgreSQL at {where}: {exc}", retryable=True),
                         pg=NO_PG)
        try:
            async with asyncio.timeout(read):
                result = await _run_sql(conn, sql, list(params) if params else None)
        except TimeoutError:
            return error(TimeoutError_(f"postgres statement did not finish within {read:g} s"), pg=NO_PG)
        except _RefusedError as exc:
            return exc.outcome
        except asyncpg.PostgresError as exc:
            return _pg_error(exc)
        except (asyncpg.InterfaceError, OSError) as exc:
            return error(PostgresError(f"{type(exc).__name__}: {exc}", retryable=isinstance(exc, OSError)),
                         pg=NO_PG)
        finally:
            await pool.release(conn)
        return ok(result)


register(PostgresTool())
