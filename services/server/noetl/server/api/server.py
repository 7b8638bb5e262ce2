"""Uvicorn in-process, as a task on the server's own event loop.

The HTTP API shares the bus (NATS, or the in-memory twin: ``noetl.events.port``) and the request
handler of the control plane it runs in, so an HTTP request costs no extra hop and the two paths
cannot drift apart. Port 0 asks the OS for a free port (tests, several servers on one host); the
bound port is read back from the listening socket.
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Any

from noetl.dsl.errors import DeploymentError
from noetl.events.port import Bus
from noetl.events.retry import retrying
from noetl.events.settings import setting
from noetl.host.http import AppServer
from noetl.server.api.app import build_app
from noetl.server.api.collector import MetricsCollector
from noetl.server.api.context import ApiContext
from noetl.store.audit import ensure_audit_stream
from noetl.store.principals import Principals

log = logging.getLogger("noetl.server.api")

TOKEN_ENV = "NOETL_API_TOKEN"
ADMIN_TOKEN_ENV = "NOETL_API_ADMIN_TOKEN"
INSECURE_ENV = "NOETL_API_INSECURE"


def api_tokens() -> tuple[str | None, str | None]:
    """``NOETL_API_TOKEN`` and ``NOETL_API_ADMIN_TOKEN`` (or their keys in ``--config``'s file),
    read through the settings; an empty one is unset."""
    token, admin = setting("api_token"), setting("api_admin_token")
    return (token.get_secret_value() or None if token else None), (
        admin.get_secret_value() or None if admin else None
    )


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"


def check_exposure(host: str, token: str | None, insecure: bool) -> None:
    """Secure by default: an API reachable from other machines must ask for a token. Without
    one, anyone who reaches the port could run playbooks (and, through them, use credentials)."""
    if token or insecure or is_loopback(host):
        return
    raise DeploymentError(
        f"the HTTP API would listen on {host} without a token: set {TOKEN_ENV} (and {ADMIN_TOKEN_ENV} "
        f"for credential management), listen on 127.0.0.1, or pass --insecure ({INSECURE_ENV}=1) on a "
        "network you trust"
    )


class ApiServer:
    def __init__(
        self,
        bus: Bus,
        requests_handler: Any,
        catalog: Any,
        credentials: Any,
        *,
        host: str = "127.0.0.1",
        port: int = 8080,
        token: str | None = None,
        admin_token: str | None = None,
        insecure: bool | None = None,
        auth_file: str | None = None,
        listener: Any = None,
        nats_state: Any = None,
    ) -> None:
        """``bus``: the bus port, chosen where the process is assembled (``start_operations``).
        ``auth_file``: the principals (``NOETL_AUTH_FILE`` when None; docs/security.md).
        ``listener``: an ``HttpListener`` already serving the probes on the port since before
        NATS was reached; the API takes its socket over instead of binding one. ``nats_state``:
        the connection's ``ConnectionState``, which ``/health`` reports."""
        env_token, env_admin_token = api_tokens()
        token = token if token is not None else env_token
        admin_token = admin_token if admin_token is not None else env_admin_token
        if insecure is None:
            insecure = bool(setting("api_insecure"))
        principals = Principals.load(token, admin_token, auth_file)
        check_exposure(host, token or ("principals" if principals.required else None), insecure)
        self.ctx = ApiContext(
            bus=bus,
            requests=requests_handler,
            catalog=catalog,
            credentials=credentials,
            token=token,
            admin_token=admin_token,
            principals=principals,
            nats_state=nats_state if nats_state is not None else getattr(listener, "state", None),
        )
        self.listener = listener
        self.host: str
        self.port: int
        self.host, self.port = (listener.host, listener.port) if listener is not None else (host, port)
        self.app = build_app(self.ctx)
        self.collector = MetricsCollector(self.ctx.bus, self.ctx.metrics)
        self._http: AppServer | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        await retrying(lambda: ensure_audit_stream(self.ctx.bus), "audit stream")
        await retrying(self.collector.start, "execution collector")
        if self.listener is not None:
            self.listener.attach(self.app)
            log.info("HTTP API listening on %s", self.url)
            return
        self._http = AppServer(self.app, self.host, self.port, "noetl-http")
        await self._http.start()
        self.port = self._http.port
        log.info("HTTP API listening on %s", self.url)

    async def stop(self) -> None:
        self.ctx.closing.set()  # ends open event streams, so shutdown does not wait on them
        if self.listener is not None:
            self.listener.attach(None)  # the port stays open; its owner closes it
        if self._http is not None:
            await self._http.stop()
            self._http = None
        await self.collector.stop()
