#!/usr/bin/env python3
"""Screenshots of issue 31's console pages for docs/console.md: rerun from a failed step (the
plan page and the rerun with its lineage), a loop's iteration table, a parent with its child
(and the list grouping it), Approve / Reject, and the schedules page. Run as the browser tests
run the console:

    .venv/bin/python scripts/console_screenshots_issue31.py [--out docs/console]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from noetl.host.natsserver import NatsServer  # noqa: E402
from tests.browser.conftest import ensure_chromium  # noqa: E402
from tests.browser.playbooks import APPROVAL, CHILD, LOOP60, PARENT, RERUN  # noqa: E402
from tests.browser.stack import ConsoleStack  # noqa: E402


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
    try:
        stack.start()
        assert stack.http is not None
        for text in (RERUN, LOOP60, CHILD, PARENT, APPROVAL):
            stack.register(text)
        failed = stack.http.post("/api/executions", json={"path": "tests/console/rerun"}).json()[
            "execution_id"
        ]
        stack.wait_status(failed, {"failed"})
        looped = stack.http.post("/api/executions", json={"path": "tests/console/loop60"}).json()[
            "execution_id"
        ]
        stack.wait_status(looped, {"success", "failed"}, timeout=60)
        parent = stack.http.post("/api/executions", json={"path": "tests/console/parent"}).json()[
            "execution_id"
        ]
        stack.wait_status(parent, {"success"})
        for name, cron in (("nightly-orders", "0 3 * * *"), ("loop-every-15min", "*/15 * * * *")):
            path = "tests/console/child" if name.startswith("nightly") else "tests/console/loop60"
            stack.http.post(f"/api/schedules/{name}", json={"path": path, "cron": cron})
        stack.http.post("/api/schedules/loop-every-15min/pause", json={})
        approval = stack.http.post("/api/executions", json={"path": "tests/console/approval"}).json()[
            "execution_id"
        ]
        deadline = time.monotonic() + 30
        while not stack.status(approval).get("waiting"):
            assert time.monotonic() < deadline
            time.sleep(0.05)

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            context = browser.new_context(viewport={"width": 1360, "height": 860}, device_scale_factor=1)
            page = context.new_page()
            page.on("dialog", lambda dialog: dialog.accept())
            page.goto(f"{stack.url}/ui/login?token={stack.token}")

            page.goto(f"{stack.url}/ui/executions/{failed}")
            page.locator('details.run[data-step="divide"] summary').click()
            page.screenshot(path=str(out / "rerun-button.png"), full_page=True)
            page.locator('details.run[data-step="divide"] a.btn-rerun').click()
            page.fill("#rerun-payload", json.dumps({"divisor": 2}, indent=2))
            page.screenshot(path=str(out / "rerun-plan.png"), full_page=True)
            page.click("#rerun-start")
            expect(page.locator("#status")).to_have_text("success")
            page.screenshot(path=str(out / "rerun-done.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{looped}")
            page.locator('details.run[data-step="each"] summary').click()
            page.locator('details.run[data-step="each"] a.iterations-link').click()
            page.select_option("#iteration-status", "failed")
            page.click("#iteration-filter")
            page.screenshot(path=str(out / "iterations-failed.png"), full_page=True)
            page.select_option("#iteration-status", "")
            page.click("#iteration-filter")
            page.screenshot(path=str(out / "iterations.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{parent}")
            page.locator('details.run[data-step="start"] summary').click()
            page.screenshot(path=str(out / "children.png"), full_page=True)
            page.goto(f"{stack.url}/ui/executions")
            page.screenshot(path=str(out / "executions-children.png"), full_page=True)

            page.goto(f"{stack.url}/ui/executions/{approval}")
            page.locator("button.btn-approve").wait_for()
            page.screenshot(path=str(out / "approval-buttons.png"), full_page=True)

            page.goto(f"{stack.url}/ui/schedules")
            page.screenshot(path=str(out / "schedules.png"), full_page=True)
            browser.close()
        stack.http.post(f"/api/executions/{approval}/signals/approval", json={"data": {"approved": True}})
        for name in ("nightly-orders", "loop-every-15min"):
            stack.http.delete(f"/api/schedules/{name}")
    finally:
        stack.stop()
        ns.stop()
    for f in sorted(out.glob("*.png")):
        print(f"wrote {f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
