"""The http kind against a local stdlib HTTP server (loopback, free port)."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from noetl.worker.tools import get_tool
from noetl.worker.tools.http import HttpServices
from tests.unit.tools.helpers import make_ctx


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(
        self,
        code: int,
        body: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (a time-out test)
            pass

    def _route(self) -> None:
        url = urlparse(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        parts = [p for p in url.path.split("/") if p]
        if parts[:1] == ["echo"]:
            body = {
                "method": self.command,
                "query": q,
                "raw": raw.decode(),
                "content_type": self.headers.get("Content-Type"),
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
            self._send(
                200,
                json.dumps(body).encode(),
                "application/json; charset=utf-8",
                {"X-Multi": "a", "x-multi": "b"},
            )
        elif parts[:1] == ["status"]:
            self._send(int(parts[1]), json.dumps({"code": "nope"}).encode())
        elif parts[:1] == ["slow"]:
            time.sleep(int(q.get("ms", "100")) / 1000)
            self._send(200, b"{}")
        elif parts[:1] == ["text"]:
            self._send(200, b"hello", "text/plain")
        elif parts[:1] == ["badjson"]:
            self._send(200, b"{not json", "application/problem+json")
        elif parts[:1] == ["empty"]:
            self._send(204, b"")
        elif parts[:1] == ["redirect"]:
            self._send(302, b"", "text/plain", {"Location": "/text"})
        else:
            self._send(404, b"{}")

    do_GET = do_POST = do_PUT = do_DELETE = _route


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
async def services() -> AsyncIterator[dict[str, HttpServices]]:
    svc = HttpServices()
    try:
        yield {"http": svc}
    finally:
        await svc.aclose()


async def call(config, services, spec=None, keychain=None):
    return await get_tool("http").run(config, make_ctx(spec=spec, keychain=keychain, services=services))


async def test_post_json_with_headers_and_query(base_url, services) -> None:
    out = await call(
        {
            "method": "post",
            "url": f"{base_url}/echo",
            "headers": {"X-Test": "yes", "X-N": 5},
            "params": {"q": "1"},
            "json": {"a": "v", "list": [1, 2]},
        },
        services,
    )
    assert out["status"] == "ok"
    result = out["result"]
    assert result["status"] == 200
    assert result["data"]["method"] == "POST"
    assert json.loads(result["data"]["raw"]) == {"a": "v", "list": [1, 2]}
    assert result["data"]["query"] == {"q": "1"}
    assert result["data"]["headers"]["x-test"] == "yes"
    assert result["data"]["headers"]["x-n"] == "5"
    assert result["headers"]["content-type"].startswith("application/json")
    assert result["headers"]["x-multi"] == "a, b"
    assert all(k == k.lower() for k in result["headers"])
    assert out["http"] == {"status": 200, "headers": result["headers"]}


async def test_body_string_is_sent_as_is_and_mapping_as_json(base_url, services) -> None:
    out = await call(
        {
            "method": "PUT",
            "url": f"{base_url}/echo",
            "body": "a=b",
            "headers": {"Content-Type": "text/plain"},
        },
        services,
    )
    assert out["result"]["data"]["raw"] == "a=b"
    out = await call({"method": "POST", "url": f"{base_url}/echo", "body": {"x": 1}}, services)
    assert json.loads(out["result"]["data"]["raw"]) == {"x": 1}
    assert out["result"]["data"]["content_type"] == "application/json"


async def test_text_bad_json_empty_and_redirect(base_url, services) -> None:
    assert (await call({"url": f"{base_url}/text"}, services))["result"]["data"] == "hello"
    assert (await call({"url": f"{base_url}/badjson"}, services))["result"]["data"] == "{not json"
    empty = await call({"url": f"{base_url}/empty"}, services)
    assert empty["result"]["status"] == 204 and empty["result"]["data"] is None  # JSON type, no body
    assert (await call({"url": f"{base_url}/redirect"}, services))["result"]["data"] == "hello"


@pytest.mark.parametrize(
    "code, retryable", [(404, False), (401, False), (429, True), (500, True), (503, True)]
)
async def test_error_status_keeps_http_and_result(base_url, services, code, retryable) -> None:
    out = await call({"url": f"{base_url}/status/{code}?token=abc"}, services)
    assert out["status"] == "error"
    assert out["error"]["kind"] == "http_error"
    assert out["error"]["retryable"] is retryable
    assert out["error"]["status"] == code
    assert out["http"]["status"] == code
    assert out["result"]["data"] == {"code": "nope"}
    assert f"/status/{code}" in out["error"]["message"]
    assert "token=abc" not in out["error"]["message"]


async def test_read_timeout(base_url, services) -> None:
    started = time.perf_counter()
    out = await call(
        {"url": f"{base_url}/slow", "params": {"ms": 1500}}, services, spec={"timeout": {"read": 0.2}}
    )
    assert time.perf_counter() - started < 1.2
    assert out["error"]["kind"] == "timeout"
    assert out["error"]["retryable"] is True
    assert out["http"] == {"status": None, "headers": {}}


async def test_timeout_number_form_allows_slow_enough(base_url, services) -> None:
    out = await call({"url": f"{base_url}/slow", "params": {"ms": 100}}, services, spec={"timeout": 2})
    assert out["status"] == "ok"


async def test_connection_refused_names_url_not_secrets(services) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = await call(
        {
            "url": f"http://user:pw-secret@127.0.0.1:{port}/x?key=k-secret",
            "headers": {"Authorization": "Bearer h-secret"},
        },
        services,
    )
    assert out["error"]["kind"] == "http_error"
    assert out["error"]["retryable"] is True
    assert f"GET http://127.0.0.1:{port}/x" in out["error"]["message"]
    assert "secret" not in json.dumps(out)
    assert out["http"] == {"status": None, "headers": {}}


async def test_invalid_url_is_not_retryable(services) -> None:
    out = await call({"url": "ftp://127.0.0.1/x"}, services)
    assert out["error"]["kind"] == "http_error" and out["error"]["retryable"] is False
    out = await call({}, services)
    assert out["error"]["kind"] == "http_error"


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"token": "t-1"}, "Bearer t-1"),
        ({"value": "v-1"}, "Bearer v-1"),
        ({"username": "u", "password": "p"}, "Basic " + base64.b64encode(b"u:p").decode()),
    ],
)
async def test_auth_from_keychain(base_url, services, data, expected) -> None:
    out = await call(
        {"url": f"{base_url}/echo", "auth": "api", "headers": {"authorization": "ignored"}},
        services,
        keychain={"api": data},
    )
    assert out["result"]["data"]["headers"]["authorization"] == expected


async def test_inline_auth(base_url, services) -> None:
    out = await call({"url": f"{base_url}/echo", "auth": {"type": "bearer", "token": "abc"}}, services)
    assert out["result"]["data"]["headers"]["authorization"] == "Bearer abc"
    out = await call(
        {"url": f"{base_url}/echo", "auth": {"type": "basic", "username": "u", "password": "p"}}, services
    )
    assert out["result"]["data"]["headers"]["authorization"].startswith("Basic ")


async def test_auth_problems(base_url, services) -> None:
    out = await call({"url": f"{base_url}/echo", "auth": "missing"}, services)
    assert out["error"]["kind"] == "keychain_unresolved" and "'missing'" in out["error"]["message"]
    out = await call(
        {"url": f"{base_url}/echo", "auth": "odd"}, services, keychain={"odd": {"secretish": "zzzz"}}
    )
    assert out["error"]["kind"] == "tool_error" and "zzzz" not in out["error"]["message"]


async def test_one_pooled_client_per_loop(base_url, services) -> None:
    svc = services["http"]
    first = svc.client()
    await call({"url": f"{base_url}/text"}, services)
    assert svc.client() is first
    await svc.aclose()
    assert first.is_closed
    assert svc.client() is not first


async def test_default_services_are_used_without_worker_services(base_url) -> None:
    from noetl.worker.tools import http

    out = await get_tool("http").run({"url": f"{base_url}/text"}, make_ctx())
    assert out["status"] == "ok"
    await http.aclose()
