import base64

from noetl.events.masking import Masker

KEYCHAIN = {
    "api": {"value": "tok-5f1c9a0e-secret"},
    "pg": {
        "host": "db",
        "port": 5432,
        "user": "admin",
        "password": "p@ss word/1",
        "nested": {"token": ["deep-secret"]},
    },
}


def test_masks_values_keys_and_substrings() -> None:
    m = Masker(KEYCHAIN)
    out = m.mask(
        {
            "headers": {"authorization": "Bearer tok-5f1c9a0e-secret"},
            "tok-5f1c9a0e-secret": 1,
            "list": ["x deep-secret y", 5, None],
            "t": ("p@ss word/1",),
        }
    )
    assert out == {
        "headers": {"authorization": "Bearer ***"},
        "***": 1,
        "list": ["x *** y", 5, None],
        "t": ("***",),
    }


def test_input_is_not_modified() -> None:
    value = {"a": ["tok-5f1c9a0e-secret"]}
    Masker(KEYCHAIN).mask(value)
    assert value == {"a": ["tok-5f1c9a0e-secret"]}


def test_short_strings_and_non_strings_are_not_secrets() -> None:
    m = Masker(KEYCHAIN)
    assert m.mask({"host": "db", "port": 5432, "s": "5432"}) == {"host": "db", "port": 5432, "s": "5432"}


def test_encoded_forms_are_masked() -> None:
    m = Masker(KEYCHAIN)
    assert m.mask_text("https://x/?pw=p%40ss%20word%2F1") == "https://x/?pw=***"
    basic = base64.b64encode(b"admin:p@ss word/1").decode()
    assert m.mask_text(f"Basic {basic}") == "Basic ***"


def test_longest_first_and_overlaps_merge() -> None:
    m = Masker({"a": {"x": "abcd", "y": "abcdefgh", "z": "ghij"}}, kinds={"a": "secret"})
    assert m.mask_text("__abcdefghij__abcd__") == "__***__***__"


def test_no_secrets_fast_path_returns_same_object() -> None:
    value = {"a": [1]}
    m = Masker({})
    assert not m
    assert m.mask(value) is value
    assert m.mask_text("abc") == "abc"


def test_extra_values() -> None:
    assert Masker(None, extra=["hunter22"]).mask_text("pw=hunter22") == "pw=***"


PG = {"host": "localhost", "user": "postgres", "password": "Pa55-word!x", "database": "test", "port": 5432}


def test_only_the_secret_material_is_masked() -> None:
    """Before: every 4+ character string of an entry was masked, so ``postgres_error`` became
    ``***_error`` and a table named from a result lost its name."""
    m = Masker({"pg_main": PG}, kinds={"pg_main": "postgres_credential"})
    data = {
        "kind": "postgres_error",
        "table": "public.postgres_jsonb_test",
        "db": "test",
        "host": "localhost",
    }
    assert m.mask(data) == data
    assert m.mask_text("auth failed for postgres with Pa55-word!x") == "auth failed for postgres with ***"


def test_every_form_of_a_secret_is_masked() -> None:
    m = Masker(
        {"pg_main": PG, "api": {"token": "tok-abcdef123456", "user": "svc"}},
        kinds={"pg_main": "postgres_credential", "api": "http"},
    )
    for form in (
        "Pa55-word!x",
        "Pa55-word%21x",  # URL-encoded
        base64.b64encode(b"Pa55-word!x").decode().rstrip("="),
        b"Pa55-word!x".hex(),
        base64.b64encode(b"postgres:Pa55-word!x").decode(),  # basic auth
        "tok-abcdef123456",
    ):
        assert m.mask_text(f"<{form}>") == "<***>", form
    assert m.mask_text("svc") == "svc" and m.mask_text("postgres") == "postgres"


def test_passwords_inside_a_dsn_and_fields_an_entry_marks_secret() -> None:
    m = Masker(
        {
            "a": {"dsn": "postgresql://app:s3cr%40t-pw@db:5432/prod", "note": "plain text"},
            "b": {"conn": "host=db user=app password=kv-secret-9 dbname=x"},
            "c": {"pin_code": "12345678", "label": "visible", "secret_fields": ["pin_code"]},
        },
        kinds={"a": "postgres_credential", "b": "postgres_credential", "c": "custom"},
    )
    assert m.mask_text("s3cr%40t-pw s3cr@t-pw kv-secret-9 12345678") == "*** *** *** ***"
    assert m.mask_text("app db prod plain text visible") == "app db prod plain text visible"


def test_a_secret_kind_entry_is_secret_through_and_through() -> None:
    m = Masker(
        {"s": {"anything": "opaque-value-1", "more": {"deep": "opaque-value-2"}}}, kinds={"s": "secret"}
    )
    assert m.mask_text("opaque-value-1 opaque-value-2") == "*** ***"
