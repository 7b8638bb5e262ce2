"""Nested iteration (SEMANTICS §19, spec 003 §6.4 and §11) through `noetl run` on real JetStream:
cities in parallel, each city's hotels in parallel in a child playbook whose iterations read the
city from `iter.parent`, each hotel's room pages in order with `jump`, against a local mock API."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
NESTED = ROOT / "docs" / "examples" / "nested"
PAGE = 2
HOTELS = {"paris": ["p1", "p2"], "rome": ["r1", "r2"], "oslo": []}
ROOMS = {"p1": 5, "p2": 1, "r2": 4}  # r1 is not found (404)


class MockApi(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _json(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if m := re.fullmatch(r"/cities/(\w+)/hotels", url.path):
            self._json(200, {"data": [{"id": h} for h in HOTELS[m[1]]]})
        elif (m := re.fullmatch(r"/cities/(\w+)/hotels/(\w+)/rooms", url.path)) and m[2] in ROOMS:
            assert m[2] in HOTELS[m[1]], "the hotel was asked for under another city"
            page = int(parse_qs(url.query)["page"][0])
            total = ROOMS[m[2]]
            rooms = [f"{m[2]}-{n}" for n in range((page - 1) * PAGE + 1, min(page * PAGE, total) + 1)]
            self._json(200, {"data": rooms, "paging": {"page": page, "hasMore": page * PAGE < total}})
        else:
            self._json(404, {"error": "not found"})


@pytest.fixture
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), MockApi)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _run(file: Path, catalog: Path, payload: dict[str, object]) -> dict[str, Any]:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "noetl.cli.main",
            "run",
            str(file),
            "--catalog",
            str(catalog),
            "--json",
            "--payload",
            json.dumps(payload),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def test_cities_hotels_pages_walkthrough(api: str) -> None:
    out = _run(NESTED / "cities.yaml", NESTED, {"api_url": api})
    assert out["status"] == "success", out["error"]
    paris, rome, oslo = out["result"]  # one entry per city, in element order
    assert paris == [
        {
            "city": "paris",
            "city_index": 0,
            "hotel": "p1",
            "status": 200,
            "pages": 3,
            "rooms": ["p1-1", "p1-2", "p1-3", "p1-4", "p1-5"],
        },
        {"city": "paris", "city_index": 0, "hotel": "p2", "status": 200, "pages": 1, "rooms": ["p2-1"]},
    ]
    assert rome == [
        {"city": "rome", "city_index": 1, "hotel": "r1", "status": 404, "pages": 1, "rooms": []},
        {
            "city": "rome",
            "city_index": 1,
            "hotel": "r2",
            "status": 200,
            "pages": 2,
            "rooms": ["r2-1", "r2-2", "r2-3", "r2-4"],
        },
    ]
    assert oslo == []


LEVEL = """
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}, path: tests/nested/{name}}}
workload: {{items: [a, b]}}
workflow:
  - step: start
    loop:
      in: "{{{{ workload.items }}}}"
      iterator: x
      spec: {{mode: parallel}}
    tool:
{tool}
"""
CALL = """      - name: call
        kind: playbook
        path: tests/nested/{child}
        args: {{items: [1]}}
"""
LEAF = """      - name: where
        kind: noop
        result:
          path: "{{ iter.parent.parent.x }}/{{ iter.parent.x }}/{{ iter.x }}"
          deeper: "{{ iter.parent.parent.parent is defined }}"
"""


def test_iter_parent_parent_goes_one_level_further(tmp_path: Path) -> None:
    (tmp_path / "top.yaml").write_text(LEVEL.format(name="top", tool=CALL.format(child="middle")))
    (tmp_path / "middle.yaml").write_text(LEVEL.format(name="middle", tool=CALL.format(child="leaf")))
    (tmp_path / "leaf.yaml").write_text(LEVEL.format(name="leaf", tool=LEAF))
    out = _run(tmp_path / "top.yaml", tmp_path, {})
    assert out["status"] == "success", out["error"]
    # top iterates a, b; middle and leaf iterate [1]; the leaf sees both callers
    assert out["result"] == [
        [[{"path": "a/1/1", "deeper": False}]],
        [[{"path": "b/1/1", "deeper": False}]],
    ]
