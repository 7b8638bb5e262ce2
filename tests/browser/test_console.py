"""The web console as a person uses it: Chromium on the pages of a real server with executions running.

Each test asserts what is on the screen (text, colours by status class, the drawn graph), and the
live tests make sure the page was not reloaded while what it shows changed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.playbooks import APPROVAL, DOUBLE, FAIL, HOLD, SLOW
from tests.browser.stack import ConsoleStack

pytestmark = pytest.mark.slow


def node(page: Any, step: str) -> Any:
    return page.locator(f'svg.graph g.node[data-step="{step}"]')


def expect_class(locator: Any, pattern: str, timeout: float = 15_000) -> None:
    from playwright.sync_api import expect

    expect(locator).to_have_class(re.compile(pattern), timeout=timeout)


def test_login_is_required_and_the_token_signs_in(browser: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    context = browser.new_context()
    try:
        pg = context.new_page()
        pg.goto(f"{console.url}/ui/workers")
        assert "/ui/login" in pg.url
        pg.fill("#token", "not-the-token")
        pg.click("button[type=submit]")
        expect(pg.get_by_role("alert")).to_contain_text("not accepted")
        pg.fill("#token", console.token)
        pg.click("button[type=submit]")
        expect(pg.locator("h1")).to_have_text("Workers and pools")
        assert pg.url.endswith("/ui/workers")
        cookie = next(c for c in context.cookies() if c["name"] == "noetl_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and console.token not in cookie["value"]
        # the cookie opens the console, not the API
        assert pg.request.get(f"{console.url}/api/executions").status == 401
        # a logged-in user sees a worker of the default pool with its load
        expect(pg.locator(f'tr[data-worker="{console.worker_id}"]')).to_be_visible()
        expect(pg.locator('section[data-pool="default"] h2')).to_have_text("Pool default")
    finally:
        context.close()


def test_running_execution_is_listed_then_drawn_and_followed_live(
    page: Any, console: ConsoleStack, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    gate = tmp_path / "gate"
    eid = console.start_execution(HOLD, {"gate": str(gate)})
    console.wait_step(eid, "hold")

    page.goto(f"{console.url}/ui/executions")
    row = page.locator(f'tr[data-execution="{eid}"]')
    expect(row).to_contain_text("tests/console/hold")
    expect(row.locator(".badge")).to_have_text("running")

    row.locator("a").first.click()
    expect(page.locator("#status")).to_have_text("running")
    for step in ("start", "hold", "squares", "finish"):
        expect(node(page, step).locator("text.name")).to_have_text(step)
    expect_class(node(page, "hold"), r"\bst-running\b")
    expect_class(node(page, "finish"), r"\bst-notrun\b")
    expect(node(page, "squares").locator("text.what")).to_have_text("loop sequential over item")
    page.evaluate("window.__sameDocument = true")

    gate.write_text("open")  # the task returns; the page must follow without a reload
    expect_class(node(page, "hold"), r"\bst-done\b")
    expect(node(page, "squares").locator("text.state")).to_have_text("3/3 done")
    expect_class(node(page, "finish"), r"\bst-done\b")
    expect(page.locator("#status")).to_have_text("success")
    expect(page.locator('svg.graph g.edge[data-arc="hold#0"]')).to_have_class(re.compile(r"\bfired\b"))
    assert page.evaluate("window.__sameDocument") is True
    expect(page.locator('details.run[data-step="squares"] .progress')).to_have_text("3/3 done")


def test_a_failed_step_shows_its_error(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    eid = console.start_execution(FAIL)
    console.wait_status(eid, {"failed"})
    page.goto(f"{console.url}/ui/executions/{eid}")
    expect(page.locator("#status")).to_have_text("failed")
    expect_class(node(page, "explode"), r"\bst-failed\b")
    expect(node(page, "explode").locator("text.state")).to_contain_text("failed")
    expect(page.locator("#execution-error")).to_contain_text("widget 42 is missing")
    run = page.locator('details.run[data-step="explode"]')
    expect(run.locator("summary .run-error")).to_contain_text("ValueError: widget 42 is missing")
    run.locator("summary").click()
    expect(run.locator("table.tasks")).to_contain_text("check_widget")


def test_cancel_button_cancels_a_running_execution(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    eid = console.start_execution(SLOW)
    console.wait_step(eid, "start")
    page.goto(f"{console.url}/ui/executions/{eid}")
    expect(page.locator("#status")).to_have_text("running")
    page.locator("button.btn-cancel").click()  # the confirm dialog is accepted by the fixture
    expect(page.locator("#status")).to_have_text("cancelled", timeout=20_000)
    expect(page.locator("button.btn-cancel")).to_have_count(0)
    assert console.status(eid)["status"] == "cancelled"


def test_an_approval_waits_and_is_signalled_from_its_page(page: Any, console: ConsoleStack) -> None:
    """SEMANTICS §17: the page says which step waits for which signal; what is typed into the signal
    form survives the live repaints (a pause and a resume from elsewhere); the signal routes the
    execution to success."""
    from playwright.sync_api import expect

    eid = console.start_execution(APPROVAL)
    assert console.http is not None
    deadline = time.monotonic() + 30
    while not console.status(eid).get("waiting"):
        assert time.monotonic() < deadline, f"{eid} never waited: {console.status(eid)}"
        time.sleep(0.05)
    page.goto(f"{console.url}/ui/executions/{eid}")
    expect(page.locator("#status")).to_have_text("running")
    wait = page.locator('#waiting li[data-step="approve"]')
    expect(wait).to_contain_text("waits for signal approval since")
    expect(wait).to_contain_text("fails with signal_timeout at")
    expect_class(node(page, "approve"), r"\bst-waiting\b")
    expect(node(page, "approve").locator("text.state")).to_have_text("waits for approval")
    expect(page.locator("#signal-name")).to_have_value("approval")  # prefilled from what the step awaits
    page.evaluate("window.__sameDocument = true")

    page.fill("#signal-data", '{"approved": true}')
    assert console.http.post(f"/api/executions/{eid}/pause", json={}).status_code == 202
    expect(page.locator("#paused")).to_have_text("paused")  # repainted live ...
    expect(page.locator("button.btn-resume")).to_be_visible()
    assert console.http.post(f"/api/executions/{eid}/resume", json={}).status_code == 202
    expect(page.locator("#paused")).to_have_count(0)
    expect(page.locator("#signal-data")).to_have_value('{"approved": true}')  # ... and the typing stays
    assert page.evaluate("window.__sameDocument") is True

    page.locator("button.btn-signal").click()  # the confirm dialog is accepted by the fixture
    expect(page.locator("#status")).to_have_text("success")
    expect_class(node(page, "ship"), r"\bst-done\b")
    expect_class(node(page, "reject"), r"\bst-notrun\b")
    expect(page.locator("#result")).to_contain_text("shipped")
    expect(page.locator("#signal-name")).to_have_count(0)
    assert console.status(eid)["result"] == "shipped"


def test_catalog_lists_a_playbook_and_its_form_starts_an_execution(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    console.register(DOUBLE)
    page.goto(f"{console.url}/ui/catalog")
    row = page.locator('tr[data-path="tests/console/double"]')
    expect(row).to_contain_text("console_double")
    row.locator("a").first.click()
    expect(page.locator("h1")).to_contain_text("tests/console/double")
    expect(node(page, "double").locator("text.name")).to_have_text("double")

    page.fill("#payload", "not json")
    page.click("form.start button[type=submit]")
    expect(page.get_by_role("alert")).to_contain_text("not JSON")

    page.fill("#payload", json.dumps({"n": 21}))
    page.click("form.start button[type=submit]")
    expect(page).to_have_url(re.compile(r"/ui/executions/[A-Za-z0-9_-]+$"))
    expect(page.locator("#status")).to_have_text("success")
    expect(page.locator("#result")).to_contain_text('"doubled": 42')


def test_noetl_run_ui_serves_the_console_of_the_embedded_run(browser: Any, tmp_path: Path) -> None:
    """`noetl run --ui` prints a sign-in link, keeps the console up after the run, and ends with the
    execution's own result and exit code on SIGTERM."""
    from playwright.sync_api import expect

    playbook = tmp_path / "hello.yaml"
    playbook.write_text(DOUBLE)
    cmd = [sys.executable, "-m", "noetl.cli.main", "run", str(playbook), "--ui", "--payload", '{"n": 4}']
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        link: str | None = None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while link is None or "stays up" not in lines[-1]:
            line = proc.stderr.readline()
            assert line and time.monotonic() < deadline, f"no console link: {lines}"
            lines.append(line)
            found = re.search(r"console at (http://127\.0\.0\.1:\d+/ui/login\?token=\S+)", line)
            link = found.group(1) if found else link
        context = browser.new_context()
        try:
            page = context.new_page()
            page.goto(link)
            assert "token=" not in page.url  # the redirect drops the token from the address bar
            expect(page.locator("#status")).to_have_text("success")
            expect(node(page, "double")).to_have_class(re.compile(r"\bst-done\b"))
            expect(page.locator("#result")).to_contain_text('"doubled": 8')
        finally:
            context.close()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, out
    assert "doubled" in out
