"""The settings as a pydantic(-settings) model: every ``NOETL_*`` variable's type, default,
constraints and description (``noetl.events.settings`` says why one object).

Kept apart from ``noetl.events.settings`` because building it imports pydantic and
pydantic-settings (~75 ms): a command that reads only settings left at their defaults (a
one-step ``noetl run``) never needs it. Only a value given (a flag, the environment, the file),
the whole object, or the generated docs load this module, so every value is still validated
here, with the same messages.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, TypeAdapter, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from noetl.events.settings import variable
from noetl.events.settings_values import (
    CONFIG_ENV,
    PREFIX,
    SettingsError,
    _empty_is_none,
    _format,
    _level,
    parse_duration,
    parse_size,
)

Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[int, BeforeValidator(parse_size)]


OptionalInt = Annotated[int | None, BeforeValidator(_empty_is_none)]
OptionalStr = Annotated[str | None, BeforeValidator(_empty_is_none)]


LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] | None, BeforeValidator(_level)]
LogFormat = Annotated[Literal["json", "console"] | None, BeforeValidator(_format)]


class Settings(BaseSettings):
    """One process's settings. Field ``x`` is the variable ``NOETL_X``; descriptions feed
    ``--help`` and the table in docs/operations.md."""

    model_config = SettingsConfigDict(
        env_prefix=PREFIX, extra="ignore", case_sensitive=False, validate_default=True
    )

    # connecting to NATS
    nats_url: str = Field(
        "nats://127.0.0.1:4222",
        description="NATS URL, or a comma-separated list of a cluster's (`--nats-url`)",
    )
    nats_user: OptionalStr = Field(None, description="NATS user name (with `NOETL_NATS_PASSWORD`)")
    nats_password: SecretStr | None = Field(None, description="NATS password (never logged)")
    nats_token: SecretStr | None = Field(None, description="NATS token (never logged)")
    nats_creds: OptionalStr = Field(None, description="a `.creds` file (JWT + nkey; needs `noetl[nkeys]`)")
    nats_nkey_seed: OptionalStr = Field(None, description="an nkey seed file (needs `noetl[nkeys]`)")
    nats_inbox_prefix: OptionalStr = Field(
        None, description="reply subjects' prefix: a principal's NATS user may read only its own inbox"
    )
    nats_tls_ca: OptionalStr = Field(None, description="CA bundle that verifies the NATS servers")
    nats_tls_cert: OptionalStr = Field(None, description="client certificate for NATS mutual TLS")
    nats_tls_key: OptionalStr = Field(None, description="the client certificate's key")
    nats_sync_interval: OptionalStr = Field(
        None,
        description="JetStream's fsync interval of a nats-server NoETL starts itself: `always` (fsync before every ack) or a duration (`2m`); unset: nats-server's default ([cost](guarantees.md#fsync-sync_interval)); a NATS you run takes `jetstream { sync_interval: always }`",
    )
    # streams
    replicas: OptionalInt = Field(
        None,
        ge=1,
        le=5,
        description="copies of every stream, KV bucket and object store (1-5, the JetStream cluster's size; `--replicas`); unset: created with 1, existing ones left",
    )
    partitions: OptionalInt = Field(
        None,
        ge=1,
        le=4096,
        description="partitions of the event log, split between server replicas (`--partitions`); fixed when the log is first used (default 8)",
    )
    events_max_age: Duration = Field(
        30 * 86400.0,
        description="how long events are kept (`30d`, `12h`; `0`: forever); set it above the longest execution",
    )
    results_max_age: Duration | None = Field(
        None,
        description="how long results stored by reference (`noetl_results`) are kept; unset: as long as the events (`NOETL_EVENTS_MAX_AGE`); `0`: forever. Results are task outputs, often data fetched with a credential: they must not outlive the log that names them",
    )
    events_max_bytes: Size = Field(
        -1,
        description="the events stream's size limit (`10GB`, `512MiB`; `-1`: unlimited); oldest events go first",
    )
    # the server
    http_port: int = Field(
        8080,
        ge=-1,
        le=65535,
        description="the server's HTTP port (API, console, probes, `/metrics`); `0` picks a free one, `-1` turns HTTP off (`--http-port`)",
    )
    http_host: str = Field("127.0.0.1", description="the address HTTP listens on (`--http-host`)")
    lease_ttl: Duration = Field(
        6.0,
        gt=0,
        description="a server replica's partition lease: another replica takes a dead one's partitions after this long",
    )
    stall_after_s: Duration = Field(
        120.0,
        gt=0,
        description="quiet time after which a running execution that waits for nothing is reported stalled",
    )
    api_token: SecretStr | None = Field(
        None, description="bearer token the HTTP API asks for (required off loopback)"
    )
    api_admin_token: SecretStr | None = Field(None, description="bearer token for credential management")
    api_insecure: bool = Field(
        False, description="serve HTTP off loopback without a token (`--insecure`; a trusted network only)"
    )
    auth_file: OptionalStr = Field(
        None,
        description="the principals of the HTTP API and the NATS services: name, token or token_sha256, role, namespaces (`--auth-file`; [security](security.md))",
    )
    token: SecretStr | None = Field(
        None,
        description="a principal's token the CLI acts with, through the checked NATS services (never logged); unset: as its NATS user",
    )
    # workers
    worker_http_port: int = Field(
        -1,
        ge=-1,
        le=65535,
        description="the worker's HTTP port (`/health`, `/ready`, `/metrics`); `0` picks a free one, `-1`: none (`noetl worker --http-port`)",
    )
    ack_wait: Duration = Field(
        30.0,
        gt=0,
        description="a worker's lease on a command: not acked or touched within it, the command goes to another worker",
    )
    max_deliver: int = Field(
        5,
        ge=1,
        description="deliveries after which a command that keeps killing workers ends as `worker_lost`",
    )
    allow_script: bool = Field(True, description="whether this worker runs `kind: script` tasks")
    credentials_key: SecretStr | None = Field(
        None, description="the key credentials are encrypted with (never logged)"
    )
    credentials_key_file: OptionalStr = Field(None, description="a file holding that key instead")
    gc_tune: bool = Field(
        True,
        description="once started, freeze the start-up heap (`gc.freeze`) and collect the young generation every 50 000 objects instead of 700 ([performance](performance.md#what-this-session-changed-and-what-each-bought))",
    )
    uvloop: bool = Field(
        False,
        description="run on uvloop's event loop when `uvloop` is installed (measured: -12 % worker CPU in a local loop; not the default)",
    )
    # every process
    log_level: LogLevel = Field(
        None, description="log level (default: INFO for server and worker, WARNING for one-shot commands)"
    )
    log_format: LogFormat = Field(
        None,
        description="`json` (JSON lines, the default when stderr is not a terminal) or `console` (also `text`)",
    )
    config: OptionalStr = Field(
        None,
        description="a YAML or JSON file of these settings (keys as in the first column without `NOETL_`, lower case; `--config`)",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _FileSource(settings_cls)


_FILES: dict[tuple[str, int, int], dict[str, Any]] = {}


class _FileSource(PydanticBaseSettingsSource):
    """The file ``NOETL_CONFIG`` names (YAML or JSON mapping), weaker than the environment."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get(CONFIG_ENV, "").strip()
        if not path:
            return {}
        try:
            info = os.stat(path)
            stamp = (path, info.st_mtime_ns, info.st_size)
            if stamp in _FILES:  # read again only when it changed: settings are read often
                return dict(_FILES[stamp])
            text = Path(path).read_text()
        except OSError as e:
            raise SettingsError(f"{CONFIG_ENV}={path}: cannot read: {e.strerror}") from None
        try:
            if path.endswith(".json"):
                data = json.loads(text)
            else:
                import yaml

                data = yaml.safe_load(text)
        except ValueError as e:
            raise SettingsError(f"{CONFIG_ENV}={path}: not JSON: {e}") from None
        except Exception as e:
            raise SettingsError(f"{CONFIG_ENV}={path}: not YAML: {type(e).__name__}") from None
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise SettingsError(f"{CONFIG_ENV}={path}: must hold a mapping of settings")
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = str(key).lower().removeprefix("noetl_")
            if name not in Settings.model_fields:
                raise SettingsError(f"{CONFIG_ENV}={path}: unknown setting {key!r}")
            out[name] = value
        _FILES.clear()
        _FILES[stamp] = out
        return dict(out)


def _one_line(e: ValidationError, overrides: dict[str, Any]) -> str:
    """The first problem as one line: the variable (or flag), the value given, what it accepts.
    A secret's value is never repeated."""
    err = e.errors()[0]
    field = str(err["loc"][0]) if err.get("loc") else "?"
    where = f"--{field.replace('_', '-')}" if field in overrides else variable(field)
    info = Settings.model_fields.get(field)
    secret = info is not None and "SecretStr" in str(info.annotation)
    shown = "" if secret else f"={err.get('input')!r}"
    return f"{where}{shown}: {_message(err)}"


def build(**overrides: Any) -> Settings:
    """``noetl.events.settings.settings``: the whole model, every value validated."""
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as e:
        raise SettingsError(_one_line(e, given)) from None


_ADAPTERS: dict[str, TypeAdapter[Any]] = {}

def read(name: str, override: Any = None) -> Any:
    """``noetl.events.settings.setting`` when a value is given (a flag, the environment or the
    file): validated alone, through the field's own type and constraints."""
    info = Settings.model_fields[name]
    if override is not None:
        raw, where = override, f"--{name.replace('_', '-')}"
    else:
        env = os.environ.get(variable(name))
        where = variable(name)
        if env is not None:
            raw = env
        else:
            from_file = _FileSource(Settings)()
            if name not in from_file:
                return info.default
            raw, where = from_file[name], f"{where} (in {os.environ.get(CONFIG_ENV)})"
    suffix = ""
    if where.endswith(")"):
        where, suffix = where.split(" (", 1)
        suffix = f" ({suffix}"
    adapter = _ADAPTERS.get(name)
    if adapter is None:
        kind: Any = info.annotation
        if info.metadata:
            kind = Annotated[(kind, *info.metadata)]
        adapter = _ADAPTERS[name] = TypeAdapter(kind)
    try:
        return adapter.validate_python(raw)
    except ValidationError as e:
        err = e.errors()[0]
        secret = "SecretStr" in str(info.annotation)
        shown = "" if secret else f"={raw!r}"
        raise SettingsError(f"{where}{shown}{suffix}: {_message(err)}") from None


def _message(err: Any) -> str:
    if err.get("type") in ("int_parsing", "int_from_float"):
        return "not a whole number"
    if err.get("type") == "bool_parsing":
        return "use true or false"
    if err.get("type") == "literal_error":
        return str(err.get("msg", "")).replace("Input should be", "use")
    return str(err.get("msg", "invalid")).removeprefix("Value error, ")


