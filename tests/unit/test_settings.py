"""Settings (issue 30): one typed object, one-line refusals naming the variable, only where used."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from noetl.cli.main import build_parser, main
from noetl.events.settings import Settings, SettingsError, setting, settings
from noetl.events.settings_docs import markdown_table

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: s, path: tests/settings}
workflow:
  - step: start
    tool: [{name: t, kind: noop}]
"""


@pytest.fixture(autouse=True)
def clean(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("NOETL_"):
            monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("30s", 30.0),
        ("500ms", 0.5),
        ("5m", 300.0),
        ("12h", 43200.0),
        ("30d", 2592000.0),
        ("0", 0.0),
    ],
)
def test_every_duration_takes_the_same_forms(
    monkeypatch: pytest.MonkeyPatch, text: str, seconds: float
) -> None:
    for name in ("NOETL_ACK_WAIT", "NOETL_EVENTS_MAX_AGE", "NOETL_LEASE_TTL", "NOETL_STALL_AFTER_S"):
        monkeypatch.setenv(name, text)
    if seconds == 0:  # a lease or a wait of nothing is refused; a retention of 0 means forever
        assert setting("events_max_age") == 0.0
        with pytest.raises(SettingsError, match=r"^NOETL_ACK_WAIT='0': "):
            setting("ack_wait")
        return
    s = settings()
    assert s.ack_wait == s.events_max_age == s.lease_ttl == s.stall_after_s == seconds


def test_the_readers_use_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl.events.streams import events_retention, replicas_wanted
    from noetl.server.api.queries import stall_after
    from noetl.server.leases import lease_ttl
    from noetl.worker.service import Worker

    monkeypatch.setenv("NOETL_ACK_WAIT", "2s")
    monkeypatch.setenv("NOETL_MAX_DELIVER", "3")
    monkeypatch.setenv("NOETL_EVENTS_MAX_AGE", "1d")
    monkeypatch.setenv("NOETL_EVENTS_MAX_BYTES", "1GiB")
    monkeypatch.setenv("NOETL_LEASE_TTL", "1500ms")
    monkeypatch.setenv("NOETL_STALL_AFTER_S", "1m")
    monkeypatch.setenv("NOETL_REPLICAS", "3")
    from noetl.events.memory import MemoryBus

    w = Worker(MemoryBus())
    assert (w.ack_wait, w.max_deliver) == (2.0, 3)
    assert events_retention() == (86400.0, 2**30)
    assert lease_ttl() == 1.5 and stall_after() == 60.0 and replicas_wanted() == 3


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("NOETL_HTTP_PORT", "abc", "NOETL_HTTP_PORT='abc': not a whole number"),
        ("NOETL_HTTP_PORT", "70000", "NOETL_HTTP_PORT='70000': Input should be less than or equal to 65535"),
        ("NOETL_ACK_WAIT", "soon", "NOETL_ACK_WAIT='soon': use a duration such as 500ms, 30s, 5m, 12h, 30d"),
        ("NOETL_REPLICAS", "7", "NOETL_REPLICAS='7': Input should be less than or equal to 5"),
        ("NOETL_EVENTS_MAX_BYTES", "lots", "NOETL_EVENTS_MAX_BYTES='lots': give a number of bytes"),
    ],
)
def test_a_bad_value_is_refused_in_one_line_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, expected: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as e:
        settings()
    assert str(e.value).startswith(expected) and "\n" not in str(e.value), e.value


def test_a_secret_is_never_repeated_in_the_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_API_INSECURE", "hunter2-not-a-bool")
    with pytest.raises(SettingsError, match="NOETL_API_INSECURE") as e:
        settings()
    assert "hunter2" in str(e.value)  # not a secret: shown
    monkeypatch.delenv("NOETL_API_INSECURE")
    monkeypatch.setenv("NOETL_NATS_TOKEN", "s3cr3t-token")
    assert "s3cr3t" not in repr(settings())


def test_a_bad_port_does_not_break_validate_but_stops_the_server(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NOETL_HTTP_PORT", "abc")
    monkeypatch.setenv("NOETL_LOG_FORMAT", "console")
    f = tmp_path / "p.yaml"
    f.write_text(PLAYBOOK)
    assert main(["validate", str(f)]) == 0
    assert main(["server", "--nats-url", "nats://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["noetl server: NOETL_HTTP_PORT='abc': not a whole number"], err
    # the flag wins over the environment, and is named when it is the bad one
    monkeypatch.setenv("NOETL_HTTP_PORT", "8080")
    monkeypatch.setenv("NOETL_LEASE_TTL", "-1")
    assert main(["server", "--http-port", "-1"]) == 2
    assert "NOETL_LEASE_TTL='-1'" in capsys.readouterr().err
    # with JSON logs (the default off a terminal) the refusal is a JSON line too
    monkeypatch.setenv("NOETL_LOG_FORMAT", "json")
    monkeypatch.delenv("NOETL_LEASE_TTL")
    monkeypatch.setenv("NOETL_WORKER_HTTP_PORT", "x1")
    assert main(["worker"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    record = json.loads(line)
    assert record["level"] == "error" and record["event"] == "NOETL_WORKER_HTTP_PORT='x1': not a whole number"


def test_a_settings_file_is_weaker_than_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    f = tmp_path / "noetl.yaml"
    f.write_text("ack_wait: 45s\nhttp_port: 9000\nNOETL_MAX_DELIVER: 7\n")
    monkeypatch.setenv("NOETL_CONFIG", str(f))
    monkeypatch.setenv("NOETL_HTTP_PORT", "9100")
    s = settings()
    assert (s.ack_wait, s.http_port, s.max_deliver) == (45.0, 9100, 7)
    assert setting("ack_wait") == 45.0 and setting("http_port") == 9100
    f.write_text("ack_wait: later\n")
    with pytest.raises(SettingsError, match=r"^NOETL_ACK_WAIT='later' \(in "):
        setting("ack_wait")
    f.write_text("no_such: 1\n")
    with pytest.raises(SettingsError, match="unknown setting 'no_such'"):
        settings()


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert re.fullmatch(r"noetl \S+\n", capsys.readouterr().out)
    text = build_parser().format_help()
    for name in Settings.model_fields:
        assert f"NOETL_{name.upper()}" in text


def test_the_operations_table_is_the_settings() -> None:
    """docs/operations.md holds ``markdown_table()`` between its markers: regenerate it with
    ``python -m noetl.events.settings --write docs/operations.md``."""
    doc = (ROOT / "docs/operations.md").read_text()
    begin, end = "<!-- settings:begin -->\n", "<!-- settings:end -->"
    assert begin in doc and end in doc, "docs/operations.md has no settings table"
    table = doc.split(begin, 1)[1].split(end, 1)[0]
    assert table == markdown_table(), "docs/operations.md's settings table is out of date"


def test_tokens_auth_file_and_credentials_key_are_read_through_the_settings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from noetl.cli.as_principal import principal_token
    from noetl.dsl.errors import DeploymentError
    from noetl.server.api.server import api_tokens
    from noetl.store.credentials import _key_text, generate_key
    from noetl.store.principals import Principals

    key = generate_key()
    monkeypatch.setenv("NOETL_API_TOKEN", "u" * 16)
    monkeypatch.setenv("NOETL_API_ADMIN_TOKEN", "")  # empty: unset, as before
    monkeypatch.setenv("NOETL_TOKEN", "p" * 16)
    monkeypatch.setenv("NOETL_CREDENTIALS_KEY", key)
    assert api_tokens() == ("u" * 16, None)
    assert principal_token() == "p" * 16
    assert _key_text(None) == key
    # from the --config file too, like every other setting; the environment still wins
    monkeypatch.delenv("NOETL_CREDENTIALS_KEY")
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    auth = tmp_path / "auth.yaml"
    auth.write_text(f"principals: [{{name: ops, token_sha256: {'a' * 64}, role: admin}}]\n")
    config = tmp_path / "noetl.yaml"
    nope = tmp_path / "nope.yaml"
    config.write_text(f"api_admin_token: {'a' * 16}\ncredentials_key_file: {key_file}\nauth_file: {nope}\n")
    monkeypatch.setenv("NOETL_CONFIG", str(config))
    monkeypatch.delenv("NOETL_API_ADMIN_TOKEN")
    assert api_tokens() == ("u" * 16, "a" * 16)
    assert _key_text(None) == key
    monkeypatch.setenv("NOETL_AUTH_FILE", str(auth))
    assert Principals.load(None, None).required  # the environment's file, not the config's
    monkeypatch.delenv("NOETL_AUTH_FILE")
    with pytest.raises(DeploymentError, match=re.escape(str(nope))):
        Principals.load(None, None)
    monkeypatch.setenv("NOETL_API_INSECURE", "maybe")
    with pytest.raises(SettingsError, match="NOETL_API_INSECURE='maybe': use true or false"):
        setting("api_insecure")


_READ = re.compile(r"os\.(?:environ\.get|getenv)\(\s*([^,)]+)|os\.environ\[([^\]]+)\](?!\s*=[^=])")


def test_no_noetl_variable_is_read_outside_the_settings() -> None:
    """Every ``NOETL_*`` variable goes through ``noetl.events.settings`` (its types, its one-line
    refusals, ``--config``, the docs table): no module reads one from ``os.environ`` itself."""
    sources = [
        p
        for folder in ("libs", "services")
        for p in (ROOT / folder).rglob("*.py")
        if p.name not in ("settings.py", "settings_model.py") or "events" not in p.parts
    ]
    constants: set[str] = set()  # names bound to "NOETL_..." anywhere (they are imported around)
    for p in sources:
        constants.update(re.findall(r'^\s*([A-Z_]+)\s*=\s*"NOETL_[A-Z_]*"', p.read_text(), re.M))
    found = []
    for p in sources:
        for n, line in enumerate(p.read_text().splitlines(), 1):
            for m in _READ.finditer(line):
                arg = (m[1] or m[2]).strip()
                if "NOETL_" in arg or arg in constants:
                    found.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


def test_the_defaults_read_without_the_model_are_the_models() -> None:
    """``setting`` answers a setting nobody gave from ``DEFAULTS``, without building the model
    (pydantic): the two must hold the same names, in the same order, with the same defaults."""
    from noetl.events.settings import DEFAULTS

    assert list(DEFAULTS.items()) == [(n, f.default) for n, f in Settings.model_fields.items()]


def test_a_setting_nobody_gave_needs_no_pydantic() -> None:
    from tests.support import loaded_by

    code = (
        "import os\n"
        "for k in [k for k in os.environ if k.startswith('NOETL_')]: del os.environ[k]\n"
        "from noetl.events.settings import setting\n"
        "assert setting('replicas') is None and setting('events_max_age') == 30 * 86400.0"
    )
    assert loaded_by(code, ("pydantic", "pydantic_settings")) == []
