#!/usr/bin/env python3
"""Screenshots of the web console for docs/console.md, taken the way the browser tests run it.

A private nats-server, a server, a worker and the HTTP API (tests/browser/stack.py), a few
executions in every state, and Debian's Chromium driven by Playwright:

    .venv/bin/pip install playwright && apt-get install chromium   # once
    .venv/bin/python scripts/console_screenshots.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from noetl.host.natsserver import NatsServer  # noqa: E402
from tests.browser.conftest import ensure_chromium  # noqa: E402
from tests.browser.playbooks import APPROVAL, DOUBLE, FAIL, HOLD, ORDERS, SLOW  # noqa: E402
from tests.browser.stack import ConsoleStack  # noqa: E402


def scheduled_approval(stack: ConsoleStack) -> str:
    """An approval waiting for its signal, started by a schedule that is deleted after its first
    fire (a second fire, if one came first, is rejected at once), so the pages show both."""
    assert stack.http is not None
    r = stack.http.post(
        "/api/schedules/approvals", json={"path": "tests/console/approval", "cron": "* * * * * *"}
    )
    assert r.status_code == 201, r.text
    deadline = time.monotonic() + 30
    while True:
        listed = stack.http.get("/api/executions", params={"status": "running"}).json()["executions"]
        started = [e["execution_id"] for e in listed if e.get("schedule") == "approvals" and e.get("waiting")]
        if started:
            break
        assert time.monotonic() < deadline, "the schedule started no approval"
        time.sleep(0.1)
    stack.http.delete("/api/schedules/approvals")
    time.sleep(1.5)
    listed = stack.http.get("/api/executions", params={"status": "running"}).json()["executions"]
    first = started[-1]  # newest first: the oldest is the last
    for e in listed:
        if e.get("schedule") == "approvals" and e["execution_id"] != first:
            stack.http.post(f"/api/executions/{e['execution_id']}/signals/approval", json={"data": {}})
    return str(first)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "docs" / "console"), help="folder for the PNG files")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    chromium = ensure_chromium()
    if chromium is None:
        print("no /usr/bin/chromium: apt-get install chromium", file=sys.stderr)
        return 2
    from playwright.sync_api import expect, sync_playwright

    ns = NatsServer().start()
    stack = ConsoleStack(ns.url)
    scratch = Path(tempfile.mkdtemp(prefix="noetl-console-"))
    gate = scratch / "gate"
    try:
        stack.start()
        for text in (ORDERS, DOUBLE, HOLD, FAIL, SLOW, APPROVAL):
            stack.register(text)
        done = stack.start_execution(ORDERS, {"delay": 0.05})
        stack.wait_status(done, {"success"})
        stack.start_execution(DOUBLE, {"n": 21})
        failed = stack.start_execution(FAIL)
        stack.wait_status(failed, {"failed"})
        cancelled = stack.start_execution(SLOW)
        stack.wait_step(cancelled, "start")
        assert stack.http is not None
        stack.http.post(f"/api/executions/{cancelled}/cancel", json={"reason": "not needed today"})
        stack.wait_status(cancelled, {"cancelled"})
        approval = scheduled_approval(stack)
        held = stack.start_execution(HOLD, {"gate": str(gate)})
        live = stack.start_execution(ORDERS, {"delay": 1.0})
        stack.wait_step(held, "hold")
        time.sleep(1.5)

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
            page = context.new_page()
            page.goto(f"{stack.url}/ui/login")
            page.screenshot(path=str(out / "login.png"))
            page.fill("#token", stack.token)
            page.click("button[type=submit]")
            expect(page.locator("h1")).to_have_text("Executions")
            page.screenshot(path=str(out / "executions.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{live}")
            page.locator('svg.graph g.node[data-step="enrich"].st-running').wait_for()
            page.screenshot(path=str(out / "execution-running.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{approval}")
            page.locator('svg.graph g.node[data-step="approve"].st-waiting').wait_for()
            page.fill("#signal-data", '{"approved": true, "by": "ana"}')
            page.screenshot(path=str(out / "execution-waiting.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{done}")
            page.locator('details.run[data-step="enrich"] summary').click()
            page.screenshot(path=str(out / "execution-done.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{failed}")
            page.locator('details.run[data-step="explode"] summary').click()
            page.screenshot(path=str(out / "execution-failed.png"), full_page=True)

            page.goto(f"{stack.url}/ui/catalog")
            page.screenshot(path=str(out / "catalog.png"), full_page=True)
            page.goto(f"{stack.url}/ui/catalog/demo/orders_daily")
            page.screenshot(path=str(out / "playbook.png"), full_page=True)

            page.goto(f"{stack.url}/ui/workers")
            page.screenshot(path=str(out / "workers.png"), full_page=True)
            browser.close()
        gate.write_text("open")
        stack.wait_status(held, {"success"})
        stack.wait_status(live, {"success"}, timeout=60)
        stack.http.post(f"/api/executions/{approval}/signals/approval", json={"data": {"approved": True}})
        stack.wait_status(approval, {"success"})
    finally:
        stack.stop()
        ns.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for f in sorted(out.glob("*.png")):
        print(f"wrote {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
