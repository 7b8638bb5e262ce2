"""The console's sign-in, cookie and post guards over HTTP against a real server and nats-server
(the browser tests in tests/browser show the pages themselves)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from noetl.events.nats_port import NatsBus
from noetl.server.api import ApiServer
from noetl.server.api.auth import session_value
from noetl.server.service import Server
from noetl.store.credentials import CredentialStore, generate_key
from tests.playbooks import approval

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
    creds = await CredentialStore.open(NatsBus(nc), generate_key())
    server = Server(NatsBus(nc), credentials=creds)
    await server.start()
    api = ApiServer(
        server.bus, server.requests, server.catalog, creds,
        host="127.0.0.1", port=0, token=token, admin_token=admin,
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

    worker = Worker(NatsBus(nc), concurrency=2)
    await worker.start()
    try:
        request = {"request_id": uuid.uuid4().hex, "playbook": PRINTS}
        out = await run_and_wait(NatsBus(nc), request, timeout=30)
    finally:
        await worker.stop(drain=False)
    assert out["status"] == "success", out.get("error")
    jar = {"Cookie": f"noetl_session={session_value(TOKEN)}"}
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
        page = await http.get(f"/ui/executions/{out['execution_id']}", headers=jar)
    assert page.status_code == 200
    assert "Output of talk" in page.text and "hello from the task &lt;b&gt;" in page.text, page.text[-2000:]


APPROVAL = approval("tests/console_http/approval")


async def _until(what: Any, timeout: float = 15.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        got = await what()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError("timed out waiting")


async def test_a_waiting_scheduled_execution_is_shown_and_signalled_from_the_console(
    nc: Any, api: ApiServer, capsys: Any
) -> None:
    """SEMANTICS §17, §18 in the console: what an execution started by a schedule waits for (the step,
    the signal, since when, its timeout), paused, and the signal form, over HTTP as the page's forms
    post it; the API list and `noetl executions` show the same."""
    from noetl.cli.main import build_parser
    from noetl.client.run import cancel, finished_event
    from noetl.events.bus import read_execution_events
    from noetl.server.api.queries import list_executions
    from noetl.store.schedules import ScheduleStore
    from noetl.worker.service import Worker

    js = nc.jetstream()
    worker = Worker(NatsBus(nc), concurrency=2)
    await worker.start()
    store = await ScheduleStore.open(NatsBus.of(js))
    jar = {"noetl_session": session_value(TOKEN)}
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    started: list[str] = []
    try:
        async with httpx.AsyncClient(base_url=api.url, timeout=10, cookies=jar) as http:
            same = {"Origin": api.url}
            assert (await http.post("/api/catalog", content=APPROVAL, headers=bearer)).status_code == 201
            sch = await store.add("approvals", path="tests/console_http/approval", cron="* * * * * *")
            assert "error" not in sch, sch

            async def scheduled() -> list[dict[str, Any]]:
                out = await list_executions(NatsBus.of(js), limit=1000)
                return [e for e in out["executions"] if e["schedule"] == "approvals"]

            first = (await _until(scheduled))[-1]
            await store.delete("approvals")  # one waiting execution is all this test needs
            started = [e["execution_id"] for e in await scheduled()]
            eid = first["execution_id"]

            async def waiting() -> list[dict[str, Any]]:
                return [e for e in await scheduled() if e["execution_id"] == eid and e["waiting"]]

            listed = (await _until(waiting))[0]
            assert [(w["step"], w["signal"], w["timeout_s"]) for w in listed["waiting"]] == [
                ("approve", "approval", 60)
            ]
            assert listed["paused"] is False and listed["waiting"][0]["since"], listed

            # the API list and `noetl executions` say the same
            r = await http.get("/api/executions", params={"status": "running", "limit": 1000}, headers=bearer)
            item = next(e for e in r.json()["executions"] if e["execution_id"] == eid)
            assert item["schedule"] == "approvals" and item["waiting"][0]["signal"] == "approval", item
            args = build_parser().parse_args(["executions", "--status", "running", "--nats-url", "nats://x"])
            assert await args.afn(nc, args) == 0
            line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(eid))
            assert "(schedule approvals)" in line and "(waiting: step approve for signal 'approval')" in line

            page = (await http.get(f"/ui/executions/{eid}")).text
            assert '<dd id="schedule">approvals</dd>' in page
            assert "Step <strong>approve</strong> waits for signal <code>approval</code> since" in page
            assert "fails with signal_timeout at" in page and "(60 s)" in page
            assert 'id="signal-name" name="signal"' in page and 'value="approval"' in page, page
            assert "btn-pause" in page and "btn-cancel" in page and "btn-resume" not in page
            assert 'data-step="approve"' in page and "st-waiting" in page  # the graph node waits
            rows = (await http.get("/ui/executions")).text
            row = rows[rows.index(f'data-execution="{eid}"') :].split("</tr>", 1)[0]
            assert "schedule approvals" in row, row
            assert "approve waits for signal <code>approval</code>" in row, row

            # pause and resume from the page: the badge and the buttons follow
            r = await http.post(f"/ui/executions/{eid}/pause", headers=same)
            assert r.status_code == 303

            async def paused() -> bool:
                return "btn-resume" in (await http.get(f"/ui/executions/{eid}")).text

            await _until(paused)
            page = (await http.get(f"/ui/executions/{eid}")).text
            assert 'id="paused"' in page and "btn-pause" not in page
            assert 'badge st-paused">paused' in (await http.get("/ui/executions")).text
            assert (await http.post(f"/ui/executions/{eid}/resume", headers=same)).status_code == 303

            # refusals: the page says why and keeps what was typed; another site's post is refused
            r = await http.post(
                f"/ui/executions/{eid}/signal", data={"signal": "approval", "data": "{yes"}, headers=same
            )
            assert r.status_code == 400 and "is not JSON" in r.text and "{yes</textarea>" in r.text
            assert 'data-live="false"' in r.text  # a refused form is not repainted under the typing
            r = await http.post(f"/ui/executions/{eid}/signal", data={"signal": "bad.name"}, headers=same)
            assert r.status_code == 400 and "signal name" in r.text
            r = await http.post(
                f"/ui/executions/{eid}/signal",
                data={"signal": "approval", "data": "{}"},
                headers={"Origin": "http://evil.example"},
            )
            assert r.status_code == 403
            r = await http.post(f"/ui/executions/{'0' * 32}/signal", data={"signal": "x"}, headers=same)
            assert r.status_code == 404

            # the signal: a double click (the same request id) is one signal; the execution routes on it
            form = {"signal": "approval", "data": '{"approved": true}', "request_id": uuid.uuid4().hex}
            for _ in range(2):
                r = await http.post(f"/ui/executions/{eid}/signal", data=form, headers=same)
                assert r.status_code == 303 and r.headers["location"] == f"/ui/executions/{eid}"
            fin = await _until(lambda: finished_event(NatsBus.of(js), eid))
            assert fin["payload"]["status"] == "success" and fin["payload"]["result"] == "shipped", fin
            names = [e["name"] for e in await read_execution_events(NatsBus.of(js), eid)]
            assert names.count("signal.received") == 1 and names.count("execution.paused") == 1, names
            page = (await http.get(f"/ui/executions/{eid}")).text
            assert 'id="signal-name"' not in page and 'id="waiting"' not in page
            r = await http.post(f"/ui/executions/{eid}/signal", data=form | {"request_id": "x"}, headers=same)
            assert r.status_code == 409 and "has finished" in r.text
    finally:
        await store.delete("approvals")
        for other in started:
            if await finished_event(NatsBus.of(js), other) is None:
                await cancel(NatsBus.of(js), other, "test over")
        await worker.stop(drain=False)
