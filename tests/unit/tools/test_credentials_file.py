import pytest

from noetl.store.credentials import generate_key, load_credentials_file


def test_conformance_format(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "api_token:\n  kind: secret\n  data:\n    value: tok-1\npg:\n  data: {dsn: 'postgresql://x'}\n"
    )
    assert load_credentials_file(p) == {
        "api_token": {"kind": "secret", "data": {"value": "tok-1"}},
        "pg": {"kind": "secret", "data": {"dsn": "postgresql://x"}},
    }


def test_an_entry_without_kind_takes_the_kind_the_playbook_declares(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("pg:\n  data: {dsn: 'postgresql://x'}\napi:\n  kind: secret\n  data: {value: v}\n")
    got = load_credentials_file(p, {"pg": "postgres_credential", "api": "other"})
    assert got["pg"]["kind"] == "postgres_credential" and got["api"]["kind"] == "secret"


def test_empty_file(tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("")
    assert load_credentials_file(p) == {}


@pytest.mark.parametrize(
    "text, message",
    [
        ("- a\n", "is a mapping"),
        ("x:\n  kind: secret\n", "needs `data`"),
        ("x:\n  data: {a: 1}\n  value: leaked\n", "unknown field"),
        ("x: [\n", "not valid YAML"),
        ("'bad name':\n  data: {}\n", "invalid"),
    ],
)
def test_errors_name_the_problem_never_values(tmp_path, text, message) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=message) as info:
        load_credentials_file(p)
    assert "leaked" not in str(info.value)


def test_generate_key_is_a_fernet_key() -> None:
    from cryptography.fernet import Fernet

    Fernet(generate_key())
