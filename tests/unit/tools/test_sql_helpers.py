import datetime as dt
import uuid
from decimal import Decimal
from types import SimpleNamespace

import pytest

from noetl.worker.tools.postgres import _RefusedError, coerce_params
from noetl.worker.tools.sqlsplit import split_statements
from noetl.worker.tools.values import ResultNotJsonError, json_safe, strict_json


def test_split_plain() -> None:
    assert split_statements("CREATE TABLE t (a int); TRUNCATE t;") == ["CREATE TABLE t (a int)", "TRUNCATE t"]


def test_split_respects_quotes_comments_and_dollar_quotes() -> None:
    sql = """INSERT INTO t VALUES ('a;b', 'it''s;'), (E'x\\';y');
    SELECT "we;ird" FROM t; -- trailing; comment
    /* block; /* nested; */ still; */ SELECT 1;
    CREATE FUNCTION f() RETURNS int AS $fn$ BEGIN RETURN 1; END $fn$ LANGUAGE plpgsql;
    DO $$ BEGIN PERFORM 1; END $$;
    SELECT $1, a$b FROM t"""
    parts = split_statements(sql)
    assert len(parts) == 6
    assert parts[0].startswith("INSERT") and parts[0].endswith("(E'x\\';y')")
    assert parts[3].endswith("LANGUAGE plpgsql")
    assert parts[4] == "DO $$ BEGIN PERFORM 1; END $$"
    assert parts[5] == "SELECT $1, a$b FROM t"


def test_split_drops_comment_only_pieces() -> None:
    assert split_statements("select 1; -- done\n") == ["select 1"]
    assert split_statements("  ;  ; ") == []


def T(name: str, kind: str = "scalar") -> SimpleNamespace:
    return SimpleNamespace(name=name, kind=kind)


def test_coerce_params_to_statement_types() -> None:
    types = (
        T("int4"),
        T("text"),
        T("numeric"),
        T("bool"),
        T("jsonb"),
        T("jsonb"),
        T("timestamptz"),
        T("date"),
        T("uuid"),
        T("int4[]", "array"),
        T("float8"),
        T("int8"),
    )
    values = [
        "1",
        2,
        "1.50",
        "yes",
        '{"a": 1}',
        "not json",
        "2024-01-02T03:04:05+00:00",
        "2024-01-02",
        "12345678-1234-5678-1234-567812345678",
        ["1", 2],
        "2.5",
        None,
    ]
    out = coerce_params(values, types)
    assert out == [
        1,
        "2",
        Decimal("1.50"),
        True,
        {"a": 1},
        "not json",
        dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        dt.date(2024, 1, 2),
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        [1, 2],
        2.5,
        None,
    ]


def test_coerce_error_names_parameter_not_value() -> None:
    with pytest.raises(_RefusedError) as info:
        coerce_params(["1", "secret-value"], (T("int4"), T("int4")))
    message = info.value.outcome["error"]["message"]
    assert "$2" in message and "int4" in message and "secret-value" not in message


def test_coerce_count_mismatch() -> None:
    with pytest.raises(_RefusedError, match="2 parameter"):
        coerce_params([1], (T("int4"), T("int4")))


def test_json_safe() -> None:
    value = {
        "d": Decimal("2.0"),
        "f": Decimal("2.5"),
        "n": Decimal("NaN"),
        "u": uuid.UUID(int=1),
        "t": dt.time(1, 2),
        "b": b"\x00\x01",
        "l": (1, {2: float("inf")}),
    }
    assert json_safe(value) == {
        "d": 2,
        "f": 2.5,
        "n": "NaN",
        "u": "00000000-0000-0000-0000-000000000001",
        "t": "01:02:00",
        "b": "AAE=",
        "l": [1, {"2": "Infinity"}],
    }


def test_strict_json() -> None:
    assert strict_json({"a": (1, 2), 3: None}) == {"a": [1, 2], "3": None}
    with pytest.raises(ResultNotJsonError, match=r"set at result\['a'\]\[0\]"):
        strict_json({"a": [{1}]})
