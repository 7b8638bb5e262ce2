"""The smaller items of issue 26, each through the real API and worker.

Before: a custom secret header (``X-Api-Key``) followed a redirect to another origin; signal
data 254 deep or over 1 MiB gave HTTP 500 after 30 s; a one-character token was accepted."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from noetl.dsl.errors import DeploymentError
from noetl.store.principals import Principals
from tests.security.conftest import ALICE, Deployment
from tests.security.test_ownership import _started

SEEN: list[dict[str, str]] = []


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


class Attacker(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        SEEN.append({k.lower(): v for k, v in self.headers.items()})
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")


@pytest.fixture
def origins() -> Iterator[tuple[str, str]]:
    attacker, attacker_url = _serve(Attacker)

    class Origin(Attacker):
        def do_GET(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"{attacker_url}/collect")
            self.send_header("Content-Length", "0")
            self.end_headers()

    origin, origin_url = _serve(Origin)
    try:
        yield origin_url, attacker_url
    finally:
        for s in (origin, attacker):
            s.shutdown()
            s.server_close()


REDIRECTED = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: redirected, path: team_a/redirected}
keychain: [{name: CRED, kind: secret}]
workload: {url: ""}
workflow:
  - step: start
    tool:
      - name: call
        kind: http
        method: GET
        url: "{{ workload.url }}/start"
        headers: {X-Api-Key: "{{ keychain.CRED.value }}", Accept: application/json}
"""


async def test_secret_headers_do_not_follow_a_redirect_to_another_origin(
    deployment: Deployment, origins: tuple[str, str]
) -> None:
    dep, (origin_url, _) = deployment, origins
    SEEN.clear()
    async with dep.http(ALICE) as alice:
        text = REDIRECTED.replace("CRED", dep.cred)
        assert (await alice.post("/api/catalog", json={"playbook": text})).status_code == 201
    code, out = await dep.run(ALICE, {"path": "team_a/redirected", "payload": {"url": origin_url}})
    assert code == 202 and out["status"] == "success", out
    assert SEEN and all("x-api-key" not in h for h in SEEN), SEEN
    assert not dep.leaked(json.dumps(SEEN))


async def test_signal_data_too_deep_or_too_large_is_refused_at_once(deployment: Deployment) -> None:
    eid = await _started(deployment)
    deep: Any = 1
    for _ in range(254):
        deep = [deep]
    async with deployment.http(ALICE) as alice:
        for data in (deep, {"blob": "x" * (1024 * 1024 + 10)}):
            started = time.perf_counter()
            r = await alice.post(f"/api/executions/{eid}/signals/approve", json={"data": data})
            assert r.status_code in (400, 413), r.text[:200]
            assert r.json()["error"]["kind"] == "request_invalid"
            assert time.perf_counter() - started < 5


@pytest.mark.parametrize("token", ["x", "short-token"])
def test_short_tokens_are_refused(token: str, tmp_path: Any) -> None:
    with pytest.raises(DeploymentError, match="at least 16"):
        Principals.load(token=token)
    auth = tmp_path / "auth.yaml"
    auth.write_text(json.dumps({"principals": [{"name": "a", "token": token, "role": "admin"}]}))
    with pytest.raises(DeploymentError, match="at least 16"):
        Principals.load(auth_file=str(auth))
    assert Principals.load(token="t-" + uuid.uuid4().hex).required


async def test_results_by_reference_have_an_age_limit(deployment: Deployment) -> None:
    from noetl.events.streams import ensure_all

    js = deployment.nc.jetstream()
    await ensure_all(js)
    assert (await js.stream_info("OBJ_noetl_results")).config.max_age == 30 * 24 * 3600


async def test_a_schedule_that_can_only_fail_is_refused(deployment: Deployment) -> None:
    async with deployment.http(ALICE) as alice:
        r = await alice.post("/api/schedules/doomed", json={"path": "team_a/missing", "cron": "* * * * * *"})
        assert r.status_code == 400 and "catalog" in r.json()["error"]["message"], r.text
        assert "doomed" not in {x["name"] for x in (await alice.get("/api/schedules")).json()["schedules"]}


async def test_queued_signals_are_bounded(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> None:
    from noetl.server import requests as handler

    monkeypatch.setattr(handler, "MAX_SIGNALS", 3)
    eid = await _started(deployment)
    # a name no step awaits is refused unless forced (signal_not_awaited); forced, it is queued,
    # and the queue is what the bound keeps finite
    url = f"/api/executions/{eid}/signals/other"
    async with deployment.http(ALICE) as alice:
        r = await alice.post(url, json={"data": 0})
        assert r.status_code == 409 and r.json()["error"]["kind"] == "signal_not_awaited", r.text
        for i in range(3):
            r = await alice.post(url, params={"force": "true"}, json={"data": i})
            assert r.status_code == 202, r.text
        await deployment.events_of(eid, "signal.received", at_least=3)
    # the API answers "sent" (it only publishes); the server refuses to record the fourth
    async with deployment.http(ALICE) as alice:
        assert (await alice.post(url, params={"force": "true"}, json={"data": 4})).status_code == 202
    await asyncio.sleep(1.0)
    events = await deployment.all_events()
    assert len([e for e in events if e["execution_id"] == eid and e["name"] == "signal.received"]) == 3


async def test_the_console_cookie_dies_at_sign_out(deployment: Deployment) -> None:
    api = deployment.api
    async with httpx.AsyncClient(base_url=api.url, timeout=30, follow_redirects=False) as browser:
        r = await browser.post("/ui/login", data={"token": ALICE, "next": "/ui/executions"},
                               headers={"Origin": api.url})
        assert r.status_code == 303, r.text
        cookie = r.cookies.get("noetl_session")
        assert cookie and ALICE not in cookie
        jar = {"Cookie": f"noetl_session={cookie}"}
        assert (await browser.get("/ui/executions", headers=jar)).status_code == 200
        r = await browser.post("/ui/logout", headers={**jar, "Origin": api.url})
        assert r.status_code == 303
        # a copy of the cookie, kept by whoever saw it, opens nothing any more
        r = await browser.get("/ui/executions", headers=jar)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
        # signing in again gives a new cookie that works
        r = await browser.post("/ui/login", data={"token": ALICE, "next": "/ui/executions"},
                               headers={"Origin": api.url})
        fresh = r.cookies.get("noetl_session")
        assert fresh and fresh != cookie
        r = await browser.get("/ui/executions", headers={"Cookie": f"noetl_session={fresh}"})
        assert r.status_code == 200


TICKS = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: ticks, path: team_a/ticks}
workflow:
  - step: start
    next: {arcs: [{step: wait}]}
  - step: wait
    spec: {policy: {lifecycle: {await: {signal: tick, timeout_s: 60}}}}
    next: {arcs: [{step: wait, when: "{{ event.result.more }}"}]}
"""


async def test_signals_a_step_took_do_not_count_against_the_queue(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the bound counted every signal the execution had ever received, so a long-lived
    execution that consumes its signals was refused for good after 10 000 of them."""
    from noetl.server import requests as handler

    monkeypatch.setattr(handler, "MAX_SIGNALS", 3)
    async with deployment.http(ALICE) as alice:
        assert (await alice.post("/api/catalog", json={"playbook": TICKS})).status_code == 201
        r = await alice.post("/api/executions", json={"path": "team_a/ticks"})
        assert r.status_code == 202, r.text
        eid = r.json()["execution_id"]
        for i in range(1, 7):  # twice the bound, each taken before the next is sent
            r = await alice.post(f"/api/executions/{eid}/signals/tick", json={"data": {"more": i < 6}})
            assert r.status_code == 202, r.text
            taken = await deployment.events_of(eid, "signal.taken", at_least=i)
            assert len(taken) == i, f"signal {i} was not taken"
            assert taken[-1]["payload"] == {"signal": "tick", "taken": i}
        for _ in range(200):
            status = (await alice.get(f"/api/executions/{eid}")).json()
            if status["status"] != "running":
                break
            await asyncio.sleep(0.05)
    assert status["status"] == "success", status
    events = [e for e in await deployment.all_events() if e["execution_id"] == eid]
    assert len([e for e in events if e["name"] == "signal.received"]) == 6
    assert max(e["payload"]["taken"] for e in events if e["name"] == "signal.taken") == 6
