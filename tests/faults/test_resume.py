"""An iteration resumes at its snapshot after its worker is killed (issue: loops at scale).

Kills: the only worker (SIGKILL) while it waits for page 5 of 8 from a paginated API.
Asserts: a new worker resumes the iteration from the snapshot in noetl_iter: pages 1-4 are
fetched exactly once, only the interrupted page 5 is fetched again, and the loop succeeds with
every page's rows."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from tests.faults.harness import Cluster, client
from tests.faults.test_kill import finish, submit

pytestmark = pytest.mark.slow

PAGES = 8


class Pages(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.calls: Counter[int] = Counter()
        self.arrived = threading.Event()  # page 5 requested
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: Pages

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        page = int(parse_qs(urlparse(self.path).query)["page"][0])
        with self.server.lock:
            self.server.calls[page] += 1
        if page == 5:
            self.server.arrived.set()
        time.sleep(0.3)
        body = json.dumps({"rows": [page * 10 + i for i in range(3)], "has_more": page < PAGES}).encode()
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the worker that asked was killed


@pytest.fixture
def pages() -> Iterator[Pages]:
    srv = Pages()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()


PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: resume, path: faults/resume}
workload: {api: "http://127.0.0.1:%d"}
workflow:
  - step: start
    loop:
      in: "{{ ['only'] }}"
      iterator: source
    tool:
      - name: init
        kind: noop
        spec: {policy: {rules: [{else: {then: {do: continue, set_iter: {page: 1, rows: []}}}}]}}
      - name: fetch_page
        kind: http
        url: "{{ workload.api }}/items"
        params: {page: "{{ iter.page }}"}
        spec:
          policy:
            rules:
              - when: "{{ outcome.status == 'ok' }}"
                then:
                  do: continue
                  set_iter:
                    rows: "{{ iter.rows + outcome.result.data.rows }}"
                    has_more: "{{ outcome.result.data.has_more }}"
              - else: {then: {do: fail}}
      - name: paginate
        kind: noop
        result: "{{ iter.rows }}"
        spec:
          policy:
            rules:
              - when: "{{ iter.has_more }}"
                then: {do: jump, to: fetch_page, set_iter: {page: "{{ iter.page + 1 }}"}}
              - else: {then: {do: break}}
"""


async def test_sigkill_worker_mid_pagination_resumes_from_snapshot(cluster: Cluster, pages: Pages) -> None:
    cluster.server()
    first = cluster.worker()
    nc = await client(cluster.url)
    try:
        eid = await submit(nc, PLAYBOOK % pages.server_address[1])
        assert await asyncio.to_thread(pages.arrived.wait, 60)
        cluster.kill(first)
        cluster.worker()
        out = await finish(nc, eid)
    finally:
        await nc.close()
    assert out["status"] == "success", cluster.output()
    assert [pages.calls[p] for p in range(1, PAGES + 1)] == [1, 1, 1, 1, 2, 1, 1, 1]
    (done,) = [e for e in out["events"] if e["name"] == "loop.iteration.done"]
    assert done["payload"]["result"] == [p * 10 + i for p in range(1, PAGES + 1) for i in range(3)]
