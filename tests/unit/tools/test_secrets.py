from noetl.worker.tools import get_tool
from tests.unit.tools.helpers import make_ctx

KEYCHAIN = {"api": {"token": "tok-123456", "user": "bob"}}


async def test_whole_entry() -> None:
    out = await get_tool("secrets").run({"name": "api"}, make_ctx(keychain=KEYCHAIN))
    assert out == {"status": "ok", "result": {"token": "tok-123456", "user": "bob"}}
    out["result"]["token"] = "changed"
    assert KEYCHAIN["api"]["token"] == "tok-123456"


async def test_one_field_with_key_alias() -> None:
    out = await get_tool("secrets").run({"key": "api", "field": "user"}, make_ctx(keychain=KEYCHAIN))
    assert out["result"] == "bob"


async def test_unknown_entry_names_it() -> None:
    out = await get_tool("secrets").run({"name": "nope"}, make_ctx(keychain=KEYCHAIN))
    assert out["error"]["kind"] == "keychain_unresolved"
    assert "'nope'" in out["error"]["message"]


async def test_unknown_field_lists_fields_not_values() -> None:
    out = await get_tool("secrets").run({"name": "api", "field": "pw"}, make_ctx(keychain=KEYCHAIN))
    assert out["error"]["kind"] == "keychain_unresolved"
    assert "token, user" in out["error"]["message"]
    assert "tok-123456" not in out["error"]["message"]
