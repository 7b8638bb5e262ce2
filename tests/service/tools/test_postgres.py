"""The postgres kind against the local PostgreSQL (NOETL_TEST_PG_DSN); skipped when unreachable."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import asyncpg
import pytest

from noetl.worker.tools import get_tool
from noetl.worker.tools.postgres import ConnectionSettings, PostgresServices
from tests.unit.tools.helpers import make_ctx

pytestmark = pytest.mark.postgres


@pytest.fixture
async def services(pg_dsn: str) -> AsyncIterator[dict[str, PostgresServices]]:
    try:
        conn = await asyncpg.connect(pg_dsn, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError) as exc:
        pytest.skip(
            f"PostgreSQL at {urlsplit(pg_dsn).hostname}:{urlsplit(pg_dsn).port} is unreachable "
            f"({type(exc).__name__}); set NOETL_TEST_PG_DSN"
        )
    await conn.close()
    svc = PostgresServices()
    try:
        yield {"postgres": svc}
    finally:
        await svc.aclose()


@pytest.fixture
def table() -> str:
    return f"noetl_test_{uuid.uuid4().hex[:10]}"


async def pg(config, services, pg_dsn, spec=None, keychain=None):
    keychain = {"pg_test": {"dsn": pg_dsn}} if keychain is None else keychain
    return await get_tool("postgres").run(
        {"auth": "pg_test", **config}, make_ctx(spec=spec, keychain=keychain, services=services)
    )


async def test_conformance_roundtrip(services, pg_dsn, table) -> None:
    setup = await pg(
        {"command": f"CREATE TABLE IF NOT EXISTS {table} (id int PRIMARY KEY, name text); TRUNCATE {table}"},
        services,
        pg_dsn,
    )
    assert setup["status"] == "ok", setup
    try:
        insert = await pg(
            {
                "command": f"INSERT INTO {table} (id, name) VALUES ($1, $2), ($3, $4)",
                "params": [1, "one", "2", 2],
            },
            services,
            pg_dsn,
        )
        assert insert == {"status": "ok", "result": {"rows": [], "columns": [], "rowcount": 2}}
        select = await pg({"query": f"SELECT id, name FROM {table} ORDER BY id"}, services, pg_dsn)
        assert select["result"] == {
            "rows": [{"id": 1, "name": "one"}, {"id": 2, "name": "2"}],
            "columns": ["id", "name"],
            "rowcount": 2,
        }
        dup = await pg(
            {"command": f"INSERT INTO {table} (id, name) VALUES ($1, $2)", "params": [1, "x"]},
            services,
            pg_dsn,
        )
        assert dup["error"]["kind"] == "postgres_error"
        assert dup["error"]["retryable"] is False
        assert dup["pg"]["sqlstate"] == "23505" and dup["pg"]["code"] == "23505"
        assert "already exists" in dup["pg"]["detail"]
    finally:
        await pg({"command": f"DROP TABLE IF EXISTS {table}"}, services, pg_dsn)


async def test_missing_table_carries_sqlstate(services, pg_dsn) -> None:
    out = await pg({"query": "SELECT * FROM noetl_no_such_table"}, services, pg_dsn)
    assert out["status"] == "error"
    assert out["error"]["kind"] == "postgres_error"
    assert out["pg"]["sqlstate"] == "42P01"
    assert "noetl_no_such_table" in out["error"]["message"]


async def test_script_returns_last_statement_rows(services, pg_dsn) -> None:
    out = await pg(
        {
            "query": "CREATE TEMP TABLE t (a int); INSERT INTO t VALUES (1), (2); "
            "SELECT sum(a) AS s, ';' AS semi FROM t; -- done"
        },
        services,
        pg_dsn,
    )
    assert out["result"] == {"rows": [{"s": 3, "semi": ";"}], "columns": ["s", "semi"], "rowcount": 1}


async def test_values_are_json_safe(services, pg_dsn) -> None:
    out = await pg(
        {
            "query": "SELECT 1.50::numeric AS n, 2::numeric AS i, '{\"a\": [1]}'::jsonb AS j, "
            "'{\"b\": 2}'::json AS j2, "
            "'2024-01-02T03:04:05+00'::timestamptz AS ts, '2024-01-02'::date AS d, "
            "'00000000-0000-0000-0000-000000000001'::uuid AS u, '\\x0001'::bytea AS b, "
            "ARRAY[1, 2] AS arr, interval '90 seconds' AS iv, 'NaN'::float8 AS f, "
            "int4range(1, 5) AS r"
        },
        services,
        pg_dsn,
    )
    row = out["result"]["rows"][0]
    assert row["n"] == 1.5 and row["i"] == 2 and isinstance(row["i"], int)
    assert row["j"] == {"a": [1]} and row["j2"] == {"b": 2}
    assert row["ts"] == "2024-01-02T03:04:05+00:00"
    assert row["d"] == "2024-01-02"
    assert row["u"] == "00000000-0000-0000-0000-000000000001"
    assert row["b"] == "AAE="
    assert row["arr"] == [1, 2]
    assert row["iv"] == 90.0
    assert row["f"] == "NaN"
    assert row["r"] == {"lower": 1, "upper": 5, "lower_inc": True, "upper_inc": False, "empty": False}
    json.dumps(out)


async def test_params_coerced_to_inferred_types(services, pg_dsn) -> None:
    out = await pg(
        {
            "query": "SELECT $1::int + 1 AS a, $2::jsonb AS j, $3::timestamptz AS t, $4::bool AS b, "
            "$5::text AS s",
            "params": ["41", {"k": 1}, "2024-01-02T00:00:00+00:00", "true", 12],
        },
        services,
        pg_dsn,
    )
    assert out["result"]["rows"] == [
        {"a": 42, "j": {"k": 1}, "t": "2024-01-02T00:00:00+00:00", "b": True, "s": "12"}
    ]


async def test_bad_param_names_parameter(services, pg_dsn) -> None:
    out = await pg({"query": "SELECT $1::int AS a", "params": ["not-a-number"]}, services, pg_dsn)
    assert out["error"]["kind"] == "postgres_error"
    assert "$1" in out["error"]["message"] and "not-a-number" not in out["error"]["message"]


async def test_timeout_then_pool_still_works(services, pg_dsn) -> None:
    out = await pg({"query": "SELECT pg_sleep(5)"}, services, pg_dsn, spec={"timeout": {"read": 0.2}})
    assert out["error"]["kind"] == "timeout" and out["error"]["retryable"] is True
    again = await pg({"query": "SELECT 1 AS one"}, services, pg_dsn)
    assert again["result"]["rows"] == [{"one": 1}]


async def test_host_fields_form_and_inline_auth(services, pg_dsn) -> None:
    parts = urlsplit(pg_dsn)
    data = {
        "host": parts.hostname,
        "port": parts.port or 5432,
        "user": parts.username or "postgres",
        "password": parts.password,
        "database": parts.path.lstrip("/"),
    }
    out = await pg({"query": "SELECT current_database() AS db"}, services, pg_dsn, keychain={"pg_test": data})
    assert out["result"]["rows"] == [{"db": data["database"]}]
    out = await get_tool("postgres").run(
        {"auth": {"dsn": pg_dsn}, "query": "SELECT 2 AS two"}, make_ctx(services=services)
    )
    assert out["result"]["rows"] == [{"two": 2}]


async def test_unreachable_server_is_retryable_and_hides_password(services) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dsn = f"postgresql://bob:pw-secret-1@127.0.0.1:{port}/nodb"
    out = await get_tool("postgres").run(
        {"auth": {"dsn": dsn}, "query": "SELECT 1"},
        make_ctx(services=services, spec={"timeout": {"connect": 2}}),
    )
    assert out["error"]["kind"] == "postgres_error" and out["error"]["retryable"] is True
    assert f"127.0.0.1:{port}/nodb" in out["error"]["message"]
    assert "pw-secret" not in json.dumps(out) and "bob" not in out["error"]["message"]
    assert out["pg"] == {"code": None, "sqlstate": None}


async def test_unknown_keychain_entry(services, pg_dsn) -> None:
    out = await pg({"query": "SELECT 1"}, services, pg_dsn, keychain={})
    assert out["error"]["kind"] == "keychain_unresolved" and "pg_test" in out["error"]["message"]


async def test_statement_prepared_once_per_connection_and_again_after_a_schema_change(
    pg_dsn: str, table: str
) -> None:
    """A loop's SQL is prepared once per pooled connection (asyncpg's statement cache), and a
    column changing type under a cached statement costs no task: the stale plan is prepared
    again and the statement run once more, the rendered value coerced to the new type."""
    try:
        conn = await asyncpg.connect(pg_dsn, timeout=3)
    except (OSError, TimeoutError, asyncpg.PostgresError):
        pytest.skip("PostgreSQL is unreachable; set NOETL_TEST_PG_DSN")
    await conn.close()
    svc = PostgresServices(max_size=1)  # one connection: every task below borrows the same one
    services = {"postgres": svc}
    try:
        made = await pg({"command": f"CREATE TABLE {table} (id int, name text)"}, services, pg_dsn)
        assert made["status"] == "ok", made
        insert = {"command": f"INSERT INTO {table} (id, name) VALUES ($1, $2)", "params": ["1", 1]}
        select = {"query": f"SELECT name FROM {table} WHERE id = $1", "params": ["1"]}
        pool = await svc.pool(ConnectionSettings({"dsn": pg_dsn}), 10)
        for _ in range(3):
            assert (await pg(insert, services, pg_dsn))["status"] == "ok"
        async with pool.acquire() as c:
            prepared = await c.fetchval(
                "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE $1", f"INSERT INTO {table}%"
            )
        assert prepared == 1
        assert (await pg(select, services, pg_dsn))["result"]["rowcount"] == 3
        altered = await pg({"command": f"ALTER TABLE {table} ALTER COLUMN id TYPE text"}, services, pg_dsn)
        assert altered["status"] == "ok", altered
        # the cached plan compares text with an integer parameter: refused, prepared again, run
        again = await pg({**select, "params": [1]}, services, pg_dsn)
        assert again["status"] == "ok", again
        assert again["result"]["rows"] == [{"name": "1"}] * 3
    finally:
        await pg({"command": f"DROP TABLE IF EXISTS {table}"}, services, pg_dsn)
        await svc.aclose()
