"""The keychain store on the in-memory twin and on a real nats-server of the test's own (the
bucket name is global)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from noetl.dsl.errors import KeychainUnresolvedError
from noetl.events.nats_port import NatsBus
from noetl.store.credentials import BUCKET, KEY_ENV, KEY_FILE_ENV, CredentialStore, generate_key


@pytest.fixture
async def nats_js(own_nats_url: str) -> AsyncIterator[object]:
    import nats

    nc = await nats.connect(own_nats_url, name="noetl-test-credentials")
    try:
        yield nc.jetstream()
    finally:
        await nc.close()


@pytest.fixture(params=["memory", "nats"])
async def js(request: pytest.FixtureRequest, own_nats_url: str) -> AsyncIterator[object]:
    """The store's behaviour on the bus port: the in-memory twin, and a real nats-server."""
    if request.param == "memory":
        from noetl.events.memory import MemoryBus

        yield MemoryBus()
        return
    import nats

    nc = await nats.connect(own_nats_url, name="noetl-test-credentials")
    try:
        yield NatsBus(nc)
    finally:
        await nc.close()


@pytest.fixture(autouse=True)
def no_key_env(monkeypatch) -> None:
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.delenv(KEY_FILE_ENV, raising=False)


async def test_put_get_list_delete(js) -> None:
    store = await CredentialStore.open(js, generate_key())
    await store.put("pg_main", "postgres_credential", {"dsn": "postgresql://u:pw-s3cret@h/db"})
    await store.put("api", "secret", {"value": "tok-xyz"})
    assert await store.get("pg_main") == {
        "kind": "postgres_credential",
        "data": {"dsn": "postgresql://u:pw-s3cret@h/db"},
    }
    assert await store.list() == [
        {"name": "api", "kind": "secret"},
        {"name": "pg_main", "kind": "postgres_credential"},
    ]
    assert await store.get("nope") is None
    assert await store.exists("api") and not await store.exists("nope")
    await store.delete("api")
    assert await store.get("api") is None
    assert await store.list() == [{"name": "pg_main", "kind": "postgres_credential"}]


async def test_values_are_encrypted_at_rest_with_no_history_left_by_delete(nats_js) -> None:
    js = nats_js
    store = await CredentialStore.open(NatsBus.of(js), generate_key())
    await store.put("api", "secret", {"value": "tok-plain-123"})
    await store.put("api", "secret", {"value": "tok-plain-456"})
    kv = await js.key_value(BUCKET)
    raw = (await kv.get("api")).value
    assert b"tok-plain" not in raw
    assert json.loads(raw)["kind"] == "secret"
    await store.delete("api")
    assert await kv.history("api") is not None  # purge leaves one marker, no value
    assert all(b"tok-plain" not in (e.value or b"") for e in await kv.history("api"))


async def test_open_twice_reuses_the_bucket(js) -> None:
    key = generate_key()
    first = await CredentialStore.open(js, key)
    await first.put("a", "secret", {"value": "v-1234"})
    second = await CredentialStore.open(js, key)
    assert (await second.get("a"))["data"] == {"value": "v-1234"}


async def test_wrong_key_is_a_clear_error(js) -> None:
    await (await CredentialStore.open(js, generate_key())).put(
        "pg_main", "secret", {"value": "v-1234"}
    )
    other = await CredentialStore.open(js, generate_key())
    with pytest.raises(KeychainUnresolvedError, match=r"'pg_main'.*NOETL_CREDENTIALS_KEY") as info:
        await other.get("pg_main")
    assert "v-1234" not in str(info.value)


async def test_without_key_names_and_kinds_still_work(js) -> None:
    await (await CredentialStore.open(js, generate_key())).put(
        "api", "secret", {"value": "v-1234"}
    )
    keyless = await CredentialStore.open(js, None)
    assert not keyless.can_decrypt
    assert await keyless.exists("api")
    assert await keyless.list() == [{"name": "api", "kind": "secret"}]
    with pytest.raises(KeychainUnresolvedError, match="no credentials key"):
        await keyless.get("api")
    with pytest.raises(KeychainUnresolvedError, match="no credentials key"):
        await keyless.put("b", "secret", {})


async def test_key_from_env_file_and_rotation(js, monkeypatch, tmp_path) -> None:
    old, new = generate_key(), generate_key()
    monkeypatch.setenv(KEY_ENV, old)
    await (await CredentialStore.open(js)).put("api", "secret", {"value": "v-1234"})
    monkeypatch.delenv(KEY_ENV)
    key_file = tmp_path / "key"
    key_file.write_text(f"{new},{old}\n")
    monkeypatch.setenv(KEY_FILE_ENV, str(key_file))
    rotated = await CredentialStore.open(js)
    assert (await rotated.get("api"))["data"] == {"value": "v-1234"}


async def test_invalid_key(js) -> None:
    with pytest.raises(KeychainUnresolvedError, match="not a valid Fernet key"):
        await CredentialStore.open(js, "short")


async def test_ciphertext_under_another_name_is_refused(js) -> None:
    store = await CredentialStore.open(js, generate_key())
    await store.put("real", "secret", {"value": "v-1234"})
    kv = store.kv  # the bucket through the port, on either bus
    await kv.put("copy", (await kv.get("real")).value)
    with pytest.raises(KeychainUnresolvedError, match="another name"):
        await store.get("copy")


async def test_resolve_names_every_missing_entry(js) -> None:
    store = await CredentialStore.open(js, generate_key())
    await store.put("a", "secret", {"value": "v-1234"})
    assert await store.resolve(["a"]) == {"a": {"value": "v-1234"}}
    with pytest.raises(KeychainUnresolvedError, match="b, c"):
        await store.resolve(["a", "b", "c"])


async def test_invalid_name(js) -> None:
    store = await CredentialStore.open(js, generate_key())
    with pytest.raises(ValueError, match="invalid"):
        await store.put("has space", "secret", {})
