"""The console's sign-in, cookie and post guards over HTTP against a real server and nats-server
(the browser tests in tests/browser show the pages themselves)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from noetl.server.api import ApiServer
from noetl.server.api.auth import session_value
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key

TOKEN, ADMIN = "user-" + uuid.uuid4().hex, "admin-" + uuid.uuid4().hex

HELLO = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: hello, path: tests/console_http/hello}
workflow:
  - step: start
    tool: {kind: noop, result: hi}
"""


async def _api(nc: Any, token: str | None, admin: str | None) -> AsyncIterator[tuple[ApiServer, Server]]:
    creds = await CredentialStore.open(nc.jetstream(), generate_key())
    server = Server(nc, credentials=creds)
    await server.start()
    api = ApiServer(
        nc, server.requests, server.catalog, creds, host="127.0.0.1", port=0, token=token, admin_token=admin
    )
    await api.start()
    try:
        yield api, server
    finally:
        await api.stop()
        await server.stop()


@pytest.fixture
async def api(nc: Any) -> AsyncIterator[ApiServer]:
    async for a, _ in _api(nc, TOKEN, ADMIN):
        yield a


async def test_pages_need_a_session_and_the_cookie_is_no_api_token(api: ApiServer) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
        r = await http.get("/ui/executions?status=failed")
        assert r.status_code == 303
        assert r.headers["location"] == "/ui/login?next=%2Fui%2Fexecutions%3Fstatus%3Dfailed"
        assert (await http.get("/ui/static/console.js")).status_code == 200  # no secret in it
        assert (await http.get("/ui/login")).status_code == 200

        r = await http.get("/ui/login", params={"token": "wrong"})
        assert r.status_code == 401 and "not accepted" in r.text and "set-cookie" not in r.headers
        r = await http.get("/ui/login", params={"token": TOKEN, "next": "//evil.example/x"})
        assert r.status_code == 303 and r.headers["location"] == "/ui/executions"
        cookie = r.headers["set-cookie"]
        assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower() and "Path=/ui" in cookie
        assert TOKEN not in cookie and session_value(TOKEN) in cookie

        jar = {"Cookie": f"noetl_session={session_value(TOKEN)}"}
        r = await http.get("/ui/executions", headers=jar)
        assert r.status_code == 200 and "<h1>Executions</h1>" in r.text
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert (await http.get("/api/executions", headers=jar)).status_code == 401
        assert (await http.get("/ui/workers", headers={"Cookie": "noetl_session=forged"})).status_code == 303
        admin = {"Cookie": f"noetl_session={session_value(ADMIN)}"}
        assert (await http.get("/ui/catalog", headers=admin)).status_code == 200
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        assert (await http.get("/ui/workers", headers=bearer)).status_code == 200

        spec = (await http.get("/openapi.json")).json()
        assert not [p for p in spec["paths"] if p.startswith("/ui")]


async def test_posts_from_another_site_are_refused(api: ApiServer) -> None:
    jar = {"noetl_session": session_value(TOKEN)}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=api.url, timeout=10, cookies=jar) as http:
        r = await http.post("/api/catalog", content=HELLO, headers=bearer)
        assert r.status_code == 201, r.text
        host = api.url.removeprefix("http://")
        form = {"path": "tests/console_http/hello", "payload": "{}"}
        r = await http.post("/ui/start", data=form, headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        r = await http.post("/ui/start", data=form, headers={"Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403
        rid = uuid.uuid4().hex
        r = await http.post(
            "/ui/start", data={**form, "request_id": rid}, headers={"Origin": f"http://{host}"}
        )
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/executions/")
        again = await http.post(
            "/ui/start", data={**form, "request_id": rid}, headers={"Origin": f"http://{host}"}
        )
        assert again.headers["location"] == r.headers["location"]  # a double click starts one execution
        eid = r.headers["location"].rsplit("/", 1)[1]
        r = await http.post(f"/ui/executions/{eid}/cancel", headers={"Origin": "http://evil.example"})
        assert r.status_code == 403
        r = await http.post("/ui/executions/nope/cancel", headers={"Origin": f"http://{host}"})
        assert r.status_code == 404
        r = await http.post(
            "/ui/start", data={**form, "payload": "[1]"}, headers={"Origin": f"http://{host}"}
        )
        assert r.status_code == 400 and "must be a JSON object" in r.text
        r = await http.get("/ui/executions/no.such", follow_redirects=False)
        assert r.status_code == 400


async def test_without_a_token_the_console_is_as_open_as_the_api(nc: Any) -> None:
    async for api, _ in _api(nc, "", ""):
        async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
            assert (await http.get("/ui/workers")).status_code == 200
            r = await http.get("/ui/login", params={"next": "/ui/catalog"})
            assert r.status_code == 303 and r.headers["location"] == "/ui/catalog"
            assert "Sign out" not in (await http.get("/ui/catalog")).text


PRINTS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: prints, path: tests/console_http/prints}
workflow:
  - step: start
    tool:
      - name: talk
        kind: python
        code: |
          def main():
              print("hello from the task <b>")
              return 1
"""


async def test_an_execution_page_shows_what_its_tasks_printed(nc: Any, api: ApiServer) -> None:
    """Issue 19: a task's output (captured per task run) is on its run in the console, escaped."""
    from noetl.client.run import run_and_wait
    from noetl.worker.service import Worker

    worker = Worker(nc, concurrency=2)
    await worker.start()
    try:
        out = await run_and_wait(nc, {"request_id": uuid.uuid4().hex, "playbook": PRINTS}, timeout=30)
    finally:
        await worker.stop(drain=False)
    assert out["status"] == "success", out.get("error")
    jar = {"Cookie": f"noetl_session={session_value(TOKEN)}"}
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
        page = await http.get(f"/ui/executions/{out['execution_id']}", headers=jar)
    assert page.status_code == 200
    assert "Output of talk" in page.text and "hello from the task &lt;b&gt;" in page.text, page.text[-2000:]
