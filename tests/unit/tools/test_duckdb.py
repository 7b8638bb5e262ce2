import asyncio

from noetl.worker.tools import get_tool
from noetl.worker.tools.duckdb import DuckdbServices
from tests.unit.tools.helpers import make_ctx


async def run(config, spec=None, services=None):
    return await get_tool("duckdb").run(config, make_ctx(spec=spec, services=services))


async def test_rows_as_mappings() -> None:
    out = await run(
        {"query": "SELECT 40 + 2 AS answer, 'x' AS letter UNION ALL SELECT 1, 'y' ORDER BY answer DESC"}
    )
    rows = [{"answer": 42, "letter": "x"}, {"answer": 1, "letter": "y"}]
    assert out == {"status": "ok", "result": {"rows": rows, "columns": ["answer", "letter"], "rowcount": 2}}


async def test_named_params() -> None:
    out = await run({"query": "SELECT $n * 2 AS doubled", "params": {"n": 21, "unused": 1}})
    assert out["result"]["rows"] == [{"doubled": 42}]


async def test_positional_params() -> None:
    out = await run({"query": "SELECT ? + ? AS s", "params": [1, 2]})
    assert out["result"]["rows"] == [{"s": 3}]
    out = await run({"query": "SELECT $2 - $1 AS d", "params": [1, 5]})
    assert out["result"]["rows"] == [{"d": 4}]


async def test_script_returns_last_statement_rows() -> None:
    out = await run(
        {
            "command": "CREATE TABLE t (a INT); INSERT INTO t VALUES ($a), ($b); SELECT sum(a) AS s FROM t",
            "params": {"a": 1, "b": 2},
        }
    )
    assert out["result"] == {"rows": [{"s": 3}], "columns": ["s"], "rowcount": 1}


async def test_dml_rowcount() -> None:
    out = await run({"command": "CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2), (3)"})
    assert out["result"]["rowcount"] == 3


async def test_values_are_json_safe() -> None:
    out = await run(
        {
            "query": "SELECT 1.50::DECIMAL(10,2) AS d, 2.00::DECIMAL(10,2) AS i, "
            "DATE '2024-01-02' AS day, TIMESTAMP '2024-01-02 03:04:05' AS ts, "
            "TIMESTAMPTZ '2024-01-02 03:04:05+02' AS tz, '\\xAA'::BLOB AS b, "
            "{'k': [1, 2]} AS s, 'nan'::DOUBLE AS f, INTERVAL 90 SECOND AS iv, "
            "[TIMESTAMPTZ '2024-01-02 00:00:00+00'] AS tzs"
        }
    )
    row = out["result"]["rows"][0]
    assert row["d"] == 1.5 and row["i"] == 2 and isinstance(row["i"], int)
    assert row["day"] == "2024-01-02"
    assert row["ts"] == "2024-01-02T03:04:05"
    assert row["tz"] == "2024-01-02T01:04:05.000000+00:00"
    assert row["b"] == "qg=="
    assert row["s"] == {"k": [1, 2]}
    assert row["f"] == "NaN"
    assert row["iv"] == 90.0
    assert len(row["tzs"]) == 1 and row["tzs"][0].startswith("2024-01-02")


async def test_sql_error_is_duckdb_error() -> None:
    out = await run({"query": "SELECT * FROM no_such_table"})
    assert out["error"]["kind"] == "duckdb_error"
    assert "no_such_table" in out["error"]["message"]
    assert out["error"]["retryable"] is False


async def test_missing_sql() -> None:
    out = await run({})
    assert out["error"]["kind"] == "tool_error"


async def test_file_database_is_shared_between_tasks(tmp_path) -> None:
    services = {"duckdb": DuckdbServices()}
    spec = {"database": str(tmp_path / "db.duckdb")}
    try:
        await run({"command": "CREATE TABLE t AS SELECT 7 AS a"}, spec=spec, services=services)
        outs = await asyncio.gather(
            *[run({"query": "SELECT a FROM t"}, spec=spec, services=services) for _ in range(4)]
        )
        assert all(o["result"]["rows"] == [{"a": 7}] for o in outs)
    finally:
        services["duckdb"].close()


async def test_memory_databases_are_separate_per_task() -> None:
    await run({"command": "CREATE TABLE t (a INT)"})
    out = await run({"query": "SELECT * FROM t"})
    assert out["error"]["kind"] == "duckdb_error"


async def test_timeout_interrupts_the_query() -> None:
    out = await run({"query": "SELECT count(*) FROM range(10000000000) a"}, spec={"timeout": 0.2})
    assert out["error"]["kind"] == "timeout"
