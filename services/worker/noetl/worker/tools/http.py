"""``http``: one HTTP request, answered as ``{status, headers, data}``.

One pooled ``httpx.AsyncClient`` serves every http task of a worker, so connections to the same
API are reused across tasks and loop iterations (a fresh client per task would pay a TCP and
TLS handshake every time). The client belongs to the event loop that created it; a different
loop (tests, a restarted worker) gets a new one.

Decisions a user may care about:

- A status of 400 or more is an error outcome (``http_error``; retryable for 429 and 5xx). It
  still carries ``http: {status, headers}`` and the parsed response as ``result``, so a policy
  can read an API's error body (``outcome.result.data.code``).
- Every outcome carries ``http``; without a response (time-out, refused connection) it is
  ``{status: null, headers: {}}``, so ``outcome.http.status in [...]`` never fails.
- Redirects are followed (httpx drops ``Authorization`` when a redirect leaves the origin).
- ``auth`` sets the ``Authorization`` header and wins over one given in ``headers``.
- Error messages name the method and the URL without its query string and user info, and
  never a header value: those are where secrets travel.
- Defaults when ``spec.timeout`` is absent: 10 s to connect, 60 s to read.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from noetl.dsl.errors import HttpError, KeychainUnresolvedError, NoetlError, TimeoutError_, ToolError
from noetl.worker.tools.base import ToolContext, error, ok, register, timeout_seconds

DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_READ_TIMEOUT = 60.0
NO_RESPONSE: dict[str, Any] = {"status": None, "headers": {}}


# headers that say nothing about who is calling: the only ones kept when a redirect leaves the origin
_KEPT_ACROSS_ORIGINS = frozenset(
    {"host", "accept", "accept-encoding", "accept-language", "user-agent", "content-type",
     "content-length", "transfer-encoding", "connection"}
)


class _RedirectSafeClient(httpx.AsyncClient):
    """httpx drops ``Authorization`` when a redirect leaves the origin, but not ``X-Api-Key`` or
    any other header a playbook filled from its keychain: a server that answers with a redirect
    to another host would receive them. Across origins only headers that identify nobody stay."""

    def _redirect_headers(self, request: httpx.Request, url: httpx.URL, method: str) -> httpx.Headers:
        headers = super()._redirect_headers(request, url, method)
        same = (url.scheme, url.host, url.port) == (request.url.scheme, request.url.host, request.url.port)
        upgrade = url.host == request.url.host and request.url.scheme == "http" and url.scheme == "https"
        if not same and not upgrade:
            for name in list(headers.keys()):
                if name.lower() not in _KEPT_ACROSS_ORIGINS:
                    del headers[name]
        return headers


class HttpServices:
    """The worker's HTTP client: created on first use, bound to the loop it was created on."""

    def __init__(self, max_connections: int = 200, max_keepalive: int = 50) -> None:
        self._limits = httpx.Limits(max_connections=max_connections,
                                    max_keepalive_connections=max_keepalive)
        self._client: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop or self._client.is_closed:
            # a client from another (possibly closed) loop cannot be closed from this one: drop it
            self._client = _RedirectSafeClient(limits=self._limits, follow_redirects=True)
            self._loop = loop
        return self._client

    async def aclose(self) -> None:
        client, loop = self._client, self._loop
        self._client = self._loop = None
        if client is not None and loop is asyncio.get_running_loop():
            await client.aclose()


_default = HttpServices()


async def aclose() -> None:
    """Close the module's shared client (worker shutdown)."""
    await _default.aclose()


def _services(ctx: ToolContext) -> HttpServices:
    services = ctx.services
    found = services.get("http") if isinstance(services, Mapping) else getattr(services, "http", None)
    return found if isinstance(found, HttpServices) else _default


def safe_url(url: str) -> str:
    """The URL for messages: no user info, no query string, no fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid url>"
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = f"{host}:{port}" if port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _BadRequestError(NoetlError):
    def __init__(self, err: ToolError | KeychainUnresolvedError) -> None:
        super().__init__(err.message)
        self.err = err


def _authorization(auth: Any, ctx: ToolContext) -> str | None:
    """The ``Authorization`` header value for ``auth`` (a keychain entry name or inline)."""
    if auth is None or auth == "":
        return None
    label = "inline auth"
    if isinstance(auth, str):
        label = f"keychain entry '{auth}'"
        data = ctx.keychain.get(auth)
        if data is None:
            raise _BadRequestError(KeychainUnresolvedError(f"{label} is not resolved for http auth",
                                                       entry=auth))
    else:
        data = auth
    if not isinstance(data, Mapping):
        raise _BadRequestError(ToolError(f"{label}: http auth must be a mapping"))
    kind = str(data.get("type", "")).lower()
    if data.get("token") is not None and kind in ("", "bearer"):
        return f"Bearer {data['token']}"
    if data.get("username") is not None and kind in ("", "basic"):
        raw = f"{data['username']}:{data.get('password') or ''}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")
    if data.get("value") is not None and kind in ("", "bearer"):
        return f"Bearer {data['value']}"
    raise _BadRequestError(ToolError(
        f"{label}: no usable http credentials; expected `token` (bearer), `username`/`password` "
        f"(basic) or `value` (bearer), found fields {sorted(str(k) for k in data)}"))


def _headers(raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _BadRequestError(ToolError("http `headers` must be a mapping"))
    return {str(k): (v if isinstance(v, str) else json.dumps(v) if isinstance(v, (dict, list)) else str(v))
            for k, v in raw.items() if v is not None}


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media in ("application/json", "text/json") or media.endswith("+json")


def _response_value(response: httpx.Response) -> dict[str, Any]:
    headers: dict[str, str] = {}
    for name, value in response.headers.multi_items():
        name = name.lower()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    data: Any
    if _is_json(response.headers.get("content-type", "")):
        try:
            data = response.json() if response.content else None
        except ValueError:
            data = response.text
    else:
        data = response.text
    return {"status": response.status_code, "headers": headers, "data": data}


class HttpTool:
    kind = "http"

    async def run(self, config: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
        url = config.get("url")
        method = str(config.get("method") or "GET").upper()
        if not isinstance(url, str) or not url:
            return error(HttpError("http task needs a `url`"), http=NO_RESPONSE)
        shown = f"{method} {safe_url(url)}"
        try:
            headers = _headers(config.get("headers"))
            authorization = _authorization(config.get("auth"), ctx)
        except _BadRequestError as exc:
            return error(exc.err, http=NO_RESPONSE)
        if authorization is not None:
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = authorization
        request: dict[str, Any] = {"headers": headers, "params": config.get("params") or None}
        if "json" in config and config.get("body") is not None:
            return error(HttpError(f"{shown}: give `json` or `body`, not both"), http=NO_RESPONSE)
        if "json" in config:
            request["json"] = config["json"]
        elif config.get("body") is not None:
            body = config["body"]
            if isinstance(body, str | bytes):
                request["content"] = body
            else:
                request["json"] = body
        connect, read = timeout_seconds(ctx.spec)
        connect = DEFAULT_CONNECT_TIMEOUT if connect is None else connect
        read = DEFAULT_READ_TIMEOUT if read is None else read
        request["timeout"] = httpx.Timeout(connect=connect, read=read, write=read, pool=None)
        try:
            response = await _services(ctx).client().request(method, url, **request)
        except httpx.TimeoutException as exc:
            which = "connect" if isinstance(exc, httpx.ConnectTimeout) else "read"
            limit = connect if which == "connect" else read
            return error(TimeoutError_(f"{shown} timed out ({which} time-out {limit:g} s)"),
                         http=NO_RESPONSE)
        except httpx.UnsupportedProtocol as exc:
            return error(HttpError(f"{shown}: {exc}", retryable=False), http=NO_RESPONSE)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            return error(HttpError(f"{shown} failed: {reason} ({type(exc).__name__})", retryable=True),
                         http=NO_RESPONSE)
        except (httpx.InvalidURL, TypeError, ValueError) as exc:
            # a request that cannot be built (bad URL, a body json cannot encode): not the server's
            # fault and not worth a retry; the exception text names the part, not header values
            return error(HttpError(f"{shown}: invalid request: {type(exc).__name__}: {exc}",
                                   retryable=False), http=NO_RESPONSE)
        value = _response_value(response)
        http = {"status": value["status"], "headers": value["headers"]}
        if response.status_code >= 400:
            retryable = response.status_code == 429 or response.status_code >= 500
            reason = response.reason_phrase or ""
            err = HttpError(f"{shown} returned {response.status_code} {reason}".rstrip(),
                            retryable=retryable, status=response.status_code)
            return error(err, http=http, result=value)
        return ok(value, http=http)


register(HttpTool())
