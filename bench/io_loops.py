"""Loops that do real I/O, each beside its raw-client floor in the same round.

- **http**: a loop of GETs against a local HTTP server (loopback, one process: an asyncio
  protocol that answers every request head with the same small JSON; uvicorn with h11 answered
  ~270 requests/s here and was the limit of both sides), ``max_in_flight`` 64, ``exec:
  distributed`` and ``exec: local``; the floor is ``httpx.AsyncClient`` (its default limits)
  doing the same number of GETs with 64 at a time from the bench process.
  Both hit the same server, so a slow server limits both alike: the ratio says whether the
  engine keeps up with the client it uses.

- **postgres**: a loop of single-row INSERTs (``kind: postgres`` through a keychain entry
  registered with ``noetl credentials set``), ``max_in_flight`` 16, both placements; the floor
  is raw asyncpg with a pool of 16 doing the same inserts 16 at a time. On
  ``NOETL_BENCH_PG_DSN`` (else ``NOETL_TEST_PG_DSN``, else the local ``test`` database) in a
  table of its own, dropped at the end; a note instead of numbers when PostgreSQL is not there.
  ``pg_tool_per_s``: the worker's ``postgres`` tool alone doing the same, without the engine.

Rounds alternate floor and engine.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.cluster import Cluster
from bench.common import FinishWatch, new_request, submit
from bench.config import Sizes
from bench.playbooks import _dump
from bench.record import Recorder
from noetl.events.ids import execution_id_for
from noetl.host.natsserver import free_port

NAME = "io_loops"
WIDTH = 64
PG_WIDTH = 16
PG_TABLE = "noetl_bench_inserts"
PG_CREDENTIAL = "pg_bench"

SERVER = """
import asyncio, sys
from noetl.events.nats_port import NatsBus

RESPONSE = (b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 11\\r\\n"
            b"\\r\\n" + b'{"ok":true}')


class Http(asyncio.Protocol):
    # keep-alive GETs without a body: one fixed response per request head
    def connection_made(self, transport):
        self.transport, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        n = self.buf.count(b"\\r\\n\\r\\n")
        if n:
            self.buf = self.buf[self.buf.rindex(b"\\r\\n\\r\\n") + 4:]
            self.transport.write(RESPONSE * n)


async def main(port):
    server = await asyncio.get_running_loop().create_server(Http, "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()

asyncio.run(main(int(sys.argv[1])))
"""


def http_loop(n: int, url: str, exec_: str) -> str:
    """``n`` GETs of ``url``, ``max_in_flight`` 64, one http task per iteration."""
    return _dump(
        {
            "metadata": {"name": f"http-{exec_}", "path": f"bench/http_{exec_}"},
            "workload": {"n": n, "url": url},
            "workflow": [
                {
                    "step": "start",
                    "loop": {
                        "in": "{{ range(workload.n) | list }}",
                        "iterator": "item",
                        "spec": {"mode": "parallel", "max_in_flight": WIDTH, "policy": {"exec": exec_}},
                    },
                    "tool": [{"name": "get", "kind": "http", "url": "{{ workload.url }}"}],
                }
            ],
        }
    )


def pg_loop(n: int, exec_: str) -> str:
    """``n`` single-row INSERTs, ``max_in_flight`` 16, through the keychain entry ``pg_bench``."""
    return _dump(
        {
            "metadata": {"name": f"pg-{exec_}", "path": f"bench/pg_{exec_}"},
            "keychain": [{"name": PG_CREDENTIAL, "kind": "postgres_credential"}],
            "workload": {"n": n},
            "workflow": [
                {
                    "step": "start",
                    "loop": {
                        "in": "{{ range(workload.n) | list }}",
                        "iterator": "item",
                        "spec": {"mode": "parallel", "max_in_flight": PG_WIDTH, "policy": {"exec": exec_}},
                    },
                    "tool": [
                        {
                            "name": "insert",
                            "kind": "postgres",
                            "auth": PG_CREDENTIAL,
                            "command": f"INSERT INTO {PG_TABLE} (id, v) VALUES ($1, $2)",
                            "params": ["{{ iter.item }}", "x"],
                        }
                    ],
                }
            ],
        }
    )


async def raw_pg(dsn: str, n: int) -> float:
    """Single-row INSERTs per second with an asyncpg pool of ``PG_WIDTH``, that many at a time."""
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=PG_WIDTH, max_size=PG_WIDTH)
    try:
        left = n

        async def lane() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await pool.execute(f"INSERT INTO {PG_TABLE} (id, v) VALUES ($1, $2)", left, "x")

        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(PG_WIDTH)))
        return n / (time.perf_counter() - t0)
    finally:
        await pool.close()


async def tool_pg(dsn: str, n: int) -> float:
    """The worker's ``postgres`` tool alone, no engine: the same INSERTs, ``PG_WIDTH`` at a time,
    through its own pools (what a worker keeps). Between the raw floor and the engine's loops it
    says how much of the gap is the tool's and how much the engine's per-iteration cost."""
    from noetl.worker.tools.base import ToolContext
    from noetl.worker.tools.postgres import PostgresServices, PostgresTool

    services = PostgresServices()
    keychain = {PG_CREDENTIAL: {"dsn": dsn}}
    ctx = ToolContext("bench", "start", "insert", {}, keychain, services={"postgres": services})
    tool = PostgresTool()
    config = {"auth": PG_CREDENTIAL, "command": f"INSERT INTO {PG_TABLE} (id, v) VALUES ($1, $2)"}
    try:
        left = n

        async def lane() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                out = await tool.run({**config, "params": [str(left), "x"]}, ctx)
                if out["status"] != "ok":
                    raise RuntimeError(f"postgres tool: {out['error']}")

        await tool.run({**config, "params": ["0", "x"]}, ctx)  # the pool made, unmeasured
        t0 = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(PG_WIDTH)))
        return n / (time.perf_counter() - t0)
    finally:
        await services.aclose()


async def _pg_table(dsn: str, create: bool) -> None:
    import asyncpg

    conn = await asyncpg.connect(dsn, timeout=3)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {PG_TABLE}")
        if create:
            await conn.execute(f"CREATE TABLE {PG_TABLE} (id int, v text)")
    finally:
        await conn.close()


class HttpServer:
    """``SERVER`` on a free loopback port, in its own process."""

    def __enter__(self) -> HttpServer:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/"
        self.proc = subprocess.Popen([sys.executable, "-c", SERVER, str(self.port)])
        import httpx

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url, timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the bench's HTTP server did not start")

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def raw_http(url: str, n: int) -> float:
    """GETs per second with ``httpx.AsyncClient``, ``WIDTH`` at a time."""
    import httpx

    left = n

    async def lane(client: Any) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            r = await client.get(url)
            r.raise_for_status()

    # its default limits: 64 connections of its own measured 282 requests/s here, the defaults 493
    async with httpx.AsyncClient(timeout=30) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(lane(client) for _ in range(WIDTH)))
        return n / (time.perf_counter() - t0)


async def engine_loop(c: Cluster, watch: FinishWatch, text: str, n: int) -> float:
    js = c.nc.jetstream()
    req = new_request(text)
    eid = execution_id_for(req["request_id"])
    done = watch.expect(eid)
    t0 = time.perf_counter()
    await (await submit(js, req))
    await asyncio.wait_for(done, timeout=max(120.0, n / 20))
    return n / (watch.succeeded(eid) - t0)


async def run(rec: Recorder, sizes: Sizes, runs: int) -> None:
    await http(rec, sizes, runs)
    await postgres(rec, sizes, runs)


async def postgres(rec: Recorder, sizes: Sizes, runs: int) -> None:
    import os

    from bench.peers import PG_DSN
    from noetl.store.credentials import KEY_ENV, generate_key

    n = sizes.io_pg
    try:
        await _pg_table(PG_DSN, create=True)
    except Exception as unreachable:
        why = type(unreachable).__name__
        rec.note(NAME, f"postgres: no numbers: no PostgreSQL ({why}); set NOETL_BENCH_PG_DSN")
        return
    rec.note(
        NAME, f"postgres: {n} single-row INSERTs, {PG_WIDTH} in flight; floor asyncpg pool of {PG_WIDTH}"
    )
    had_key = os.environ.get(KEY_ENV)
    os.environ[KEY_ENV] = had_key or generate_key()  # the services and the CLI share it
    try:
        async with Cluster(concurrency=sizes.worker_concurrency) as c:
            cli = [
                str(Path(sys.executable).parent / "noetl"),
                "credentials",
                "set",
                PG_CREDENTIAL,
                "--kind",
                "postgres_credential",
                "--data",
                json.dumps({"dsn": PG_DSN}),
                "--allow-inline",
                "--anonymous",
                "--nats-url",
                c._url,
            ]
            p = await asyncio.to_thread(subprocess.run, cli, capture_output=True, text=True, timeout=60)
            if p.returncode != 0:
                raise RuntimeError(f"noetl credentials set: {p.stderr.strip()[-300:]}")
            watch = await FinishWatch(c.nc).start()
            texts = {e: pg_loop(n, e) for e in ("distributed", "local")}
            await raw_pg(PG_DSN, 50)
            for e in texts:
                await engine_loop(c, watch, pg_loop(20, e), 20)
            for _ in range(runs):
                rec.add(NAME, "pg_raw_per_s", await raw_pg(PG_DSN, n), "rows/s", higher=True)
                rec.add(NAME, "pg_tool_per_s", await tool_pg(PG_DSN, n), "rows/s", higher=True)
                for e, text in texts.items():
                    label = "dist" if e == "distributed" else "local"
                    rec.add(
                        NAME, f"pg_{label}_per_s", await engine_loop(c, watch, text, n), "rows/s", higher=True
                    )
            await watch.stop()
    finally:
        if had_key is None:
            os.environ.pop(KEY_ENV, None)
        await _pg_table(PG_DSN, create=False)


async def http(rec: Recorder, sizes: Sizes, runs: int) -> None:
    n = sizes.io_http
    what = f"{n} GETs of a local asyncio HTTP server, {WIDTH} in flight"
    rec.note(NAME, f"http: {what}; floor httpx.AsyncClient with its default limits")
    with HttpServer() as srv:
        async with Cluster(concurrency=sizes.worker_concurrency) as c:
            watch = await FinishWatch(c.nc).start()
            texts = {e: http_loop(n, srv.url, e) for e in ("distributed", "local")}
            await raw_http(srv.url, 200)  # warm-up, unrecorded
            for e in texts:
                await engine_loop(c, watch, http_loop(50, srv.url, e), 50)
            for _ in range(runs):
                rec.add(NAME, "http_raw_per_s", await raw_http(srv.url, n), "req/s", higher=True)
                for e, text in texts.items():
                    label = "dist" if e == "distributed" else "local"
                    rate = await engine_loop(c, watch, text, n)
                    rec.add(NAME, f"http_{label}_per_s", rate, "req/s", higher=True)
            await watch.stop()
