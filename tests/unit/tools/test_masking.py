import base64

from noetl.events.masking import Masker

KEYCHAIN = {
    "api": {"value": "tok-5f1c9a0e-secret"},
    "pg": {"host": "db", "port": 5432, "user": "admin", "password": "p@ss word/1",
           "nested": {"k": ["deep-secret"]}},
}


def test_masks_values_keys_and_substrings() -> None:
    m = Masker(KEYCHAIN)
    out = m.mask({"headers": {"authorization": "Bearer tok-5f1c9a0e-secret"},
                  "tok-5f1c9a0e-secret": 1, "list": ["x deep-secret y", 5, None], "t": ("p@ss word/1",)})
    assert out == {"headers": {"authorization": "Bearer ***"}, "***": 1, "list": ["x *** y", 5, None],
                   "t": ("***",)}


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
    m = Masker({"a": {"x": "abcd", "y": "abcdefgh", "z": "ghij"}})
    assert m.mask_text("__abcdefghij__abcd__") == "__***__***__"


def test_no_secrets_fast_path_returns_same_object() -> None:
    value = {"a": [1]}
    m = Masker({})
    assert not m
    assert m.mask(value) is value
    assert m.mask_text("abc") == "abc"


def test_extra_values() -> None:
    assert Masker(None, extra=["hunter22"]).mask_text("pw=hunter22") == "pw=***"
