from noetl.worker.tools import get_tool
from tests.unit.tools.helpers import make_ctx


async def test_noop_returns_result_field() -> None:
    out = await get_tool("noop").run({"result": -1}, make_ctx(prev={"a": 1}))
    assert out == {"status": "ok", "result": -1}


async def test_noop_null_result_field_is_a_result() -> None:
    out = await get_tool("noop").run({"result": None}, make_ctx(prev={"a": 1}))
    assert out["result"] is None


async def test_noop_passes_prev_on() -> None:
    out = await get_tool("noop").run({}, make_ctx(prev={"a": 1}))
    assert out == {"status": "ok", "result": {"a": 1}}


def test_every_builtin_tool_kind_is_registered() -> None:
    from noetl.dsl.kinds import BUILTIN_KINDS
    from noetl.worker.tools import registered_kinds

    assert registered_kinds() == BUILTIN_KINDS - {"workbook"}
