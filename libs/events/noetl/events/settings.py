"""Every ``NOETL_*`` setting of a process, as one typed object (pydantic-settings).

Why one object: the settings used to be read with bare ``int()``/``float()`` in ten modules,
some at import time, so ``NOETL_HTTP_PORT=abc`` broke even ``noetl validate`` and
``NOETL_ACK_WAIT=30s`` raised a ValueError where ``NOETL_EVENTS_MAX_AGE=30d`` was accepted.
Here each setting has one type, one default and one description; durations accept the same
forms everywhere (``500ms``, ``30``, ``30s``, ``5m``, ``12h``, ``30d``); a bad value is refused
with one line naming the variable (``SettingsError``), and only by the command that needs it.

Sources, strongest first: the command's flags (passed by the CLI as overrides), the environment,
then an optional file named by ``NOETL_CONFIG`` (``--config``; YAML or JSON, keys as the field
names, ``http_port: 8080``), then the defaults. ``docs/operations.md`` holds the table
``markdown_table()`` writes (a test keeps them equal); ``noetl --help`` shows it too.

Settings are read when asked for, not cached across changes of the environment: tests and
embedding code that set a variable see it at the next call. Reading costs tens of microseconds,
so callers on hot paths read once (at construction) and keep the value.

The model itself (``Settings``, ``noetl.events.settings_model``) is loaded on first need: a
setting nobody gave is its default, read from ``DEFAULTS`` without importing pydantic, which
saves a one-step ``noetl run`` ~75 ms of its start-up (a test keeps ``DEFAULTS`` equal to the
model's defaults).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from noetl.events.settings_values import CONFIG_ENV, PREFIX, SettingsError, parse_duration, parse_size

if TYPE_CHECKING:
    from noetl.events.settings_model import Settings

__all__ = [
    "CONFIG_ENV",
    "PREFIX",
    "Settings",
    "SettingsError",
    "parse_duration",
    "parse_size",
    "setting",
    "settings",
]

# each field's default, as the model declares it (a test compares them), in its order
DEFAULTS: dict[str, Any] = {
    "nats_url": "nats://127.0.0.1:4222",
    "nats_user": None,
    "nats_password": None,
    "nats_token": None,
    "nats_creds": None,
    "nats_nkey_seed": None,
    "nats_inbox_prefix": None,
    "nats_tls_ca": None,
    "nats_tls_cert": None,
    "nats_tls_key": None,
    "nats_sync_interval": None,
    "replicas": None,
    "partitions": None,
    "events_max_age": 30 * 86400.0,
    "results_max_age": None,
    "events_max_bytes": -1,
    "http_port": 8080,
    "http_host": "127.0.0.1",
    "lease_ttl": 6.0,
    "stall_after_s": 120.0,
    "api_token": None,
    "api_admin_token": None,
    "api_insecure": False,
    "auth_file": None,
    "token": None,
    "worker_http_port": -1,
    "ack_wait": 30.0,
    "max_deliver": 5,
    "allow_script": True,
    "credentials_key": None,
    "credentials_key_file": None,
    "gc_tune": True,
    "uvloop": False,
    "log_level": None,
    "log_format": None,
    "config": None,
}

# the processes that read each setting (the table's third column; unlisted: every process)
USED_BY = {
    "nats_sync_interval": "`noetl run`, bench, the tests' nats-servers",
    "replicas": "server, worker, commands that declare streams",
    "partitions": "server",
    "events_max_age": "whoever creates `NOETL_EVENTS`",
    "events_max_bytes": "whoever creates `NOETL_EVENTS`",
    "results_max_age": "whoever creates `noetl_results`",
    "http_port": "server",
    "http_host": "server, worker",
    "lease_ttl": "server",
    "stall_after_s": "server (API, console, metrics)",
    "api_token": "server",
    "api_admin_token": "server",
    "api_insecure": "server",
    "auth_file": "server",
    "token": "CLI commands",
    "worker_http_port": "worker",
    "ack_wait": "worker",
    "max_deliver": "worker",
    "allow_script": "worker",
    "gc_tune": "server, worker, `noetl run`",
    "uvloop": "server, worker",
    "credentials_key": "worker, server API, `noetl credentials`",
    "credentials_key_file": "worker, server API, `noetl credentials`",
}




def variable(field: str) -> str:
    return f"{PREFIX}{field.upper()}"


def settings(**overrides: Any) -> Settings:
    """The settings now: ``overrides`` (the flags given; None ones are ignored) over the
    environment over the file over the defaults. Raises ``SettingsError`` (one line)."""
    from noetl.events.settings_model import build

    return build(**overrides)


def setting(name: str, override: Any = None) -> Any:
    """One setting, validated alone: ``override`` (a flag given), else ``NOETL_<NAME>``, else the
    file's value, else the default. A module asks only for what it uses, so a bad value of an
    unrelated variable (``NOETL_HTTP_PORT=abc``) never breaks ``noetl validate``."""
    default = DEFAULTS[name]
    if override is None and variable(name) not in os.environ and not os.environ.get(CONFIG_ENV, "").strip():
        return default  # nothing given: no value to validate, no model to build
    from noetl.events.settings_model import read

    return read(name, override)


def __getattr__(name: str) -> Any:
    if name == "Settings":
        from noetl.events.settings_model import Settings

        return Settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":  # python -m noetl.events.settings --write docs/operations.md
    from noetl.events.settings_docs import main

    main()
