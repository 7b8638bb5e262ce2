"""Issue 31 in Chromium: rerun from a failed step, a loop's iteration table past 50 iterations,
links between a parent and its children, Approve / Reject, and the schedules page."""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest

from tests.browser.playbooks import CHILD, LOOP60, PARENT, RERUN
from tests.browser.stack import ConsoleStack
from tests.browser.test_console import expect_class, node
from tests.playbooks import approval

pytestmark = pytest.mark.slow


def test_rerun_from_the_failed_step_keeps_what_succeeded(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    eid = console.start_execution(RERUN)
    console.wait_status(eid, {"failed"})
    page.goto(f"{console.url}/ui/executions/{eid}")
    run = page.locator('details.run[data-step="divide"]')
    run.locator("summary").click()
    run.locator("a.btn-rerun").click()
    expect(page.locator("h1")).to_contain_text("from divide")
    expect(page.locator("#rerun-kept")).to_contain_text("fetch")
    expect(page.locator("#rerun-not-kept")).to_contain_text("Everything before this step is kept")
    page.fill("#rerun-payload", "[1]")
    page.click("#rerun-start")
    expect(page.get_by_role("alert")).to_contain_text("must be a JSON object")
    page.fill("#rerun-payload", json.dumps({"divisor": 2}))
    page.click("#rerun-start")
    expect(page).to_have_url(re.compile(r"/ui/executions/[0-9a-f]{32}$"))
    rerun = page.url.rsplit("/", 1)[-1]
    assert rerun != eid
    expect(page.locator("#status")).to_have_text("success")
    expect(page.locator("#forked-from")).to_have_attribute("href", f"/ui/executions/{eid}")
    expect_class(node(page, "fetch"), r"\bst-kept\b")  # kept, not run again
    expect(node(page, "fetch").locator("text.state")).to_have_text("kept from the original")
    expect_class(node(page, "divide"), r"\bst-done\b")
    expect(page.locator("#result")).to_contain_text("10 split")
    page.locator("#forked-from").click()  # and back: the original lists its rerun
    expect(page.locator(f'#reruns li[data-rerun="{rerun}"]')).to_contain_text("from divide")


def test_failed_iteration_57_of_60_is_found_in_the_iteration_table(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    eid = console.start_execution(LOOP60)
    console.wait_status(eid, {"success", "failed"}, timeout=60)
    page.goto(f"{console.url}/ui/executions/{eid}")
    run = page.locator('details.run[data-step="each"]')
    run.locator("summary").click()
    run.locator("a.iterations-link").click()
    expect(page.locator("#iteration-counts")).to_contain_text("60 iterations")
    expect(page.locator("#iteration-counts")).to_contain_text("59 done")
    expect(page.locator("#iterations tbody tr")).to_have_count(50)
    expect(page.locator("#iteration-bars g.bar")).to_have_count(50)  # the page's iterations as bars
    page.click("#iterations-next")
    expect(page.locator("#iterations tbody tr")).to_have_count(10)
    expect(page.locator('#iterations tr[data-index="57"]')).to_contain_text("item 57 is bad")
    page.select_option("#iteration-status", "failed")
    page.click("#iteration-filter")
    rows = page.locator("#iterations tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("#57")
    expect(rows.first).to_contain_text("python_error")
    expect(page.locator('#iteration-bars g.bar.st-failed[data-index="57"]')).to_have_count(1)
    expect_class(rows.first, r"\bst-failed\b")


def test_a_parent_links_to_its_child_and_back(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    console.register(CHILD)
    eid = console.start_execution(PARENT)
    console.wait_status(eid, {"success"})
    page.goto(f"{console.url}/ui/executions/{eid}")
    child = page.locator("#children li").first
    expect(child).to_contain_text("tests/console/child")
    expect(child.locator(".badge")).to_have_text("success")
    child_id = child.get_attribute("data-child")
    page.goto(f"{console.url}/ui/executions")
    row = page.locator(f'tr[data-execution="{child_id}"]')
    expect(row).to_have_attribute("data-parent", eid)
    expect_class(row, r"\bchild-row\b")
    # the child sits right under its parent
    ids = page.locator("tr[data-execution]").evaluate_all("rows => rows.map(r => r.dataset.execution)")
    assert ids.index(child_id) == ids.index(eid) + 1
    row.locator("a").first.click()
    expect(page.locator("#parent-link")).to_have_attribute("href", f"/ui/executions/{eid}")
    page.locator("#parent-link").click()
    page.locator('details.run[data-step="start"] summary').click()
    expect(page.locator("a.child-link")).to_have_attribute("href", f"/ui/executions/{child_id}")


def _waiting(console: ConsoleStack, playbook: str) -> str:
    eid = console.start_execution(playbook)
    deadline = time.monotonic() + 30
    while not console.status(eid).get("waiting"):
        assert time.monotonic() < deadline, f"{eid} never waited"
        time.sleep(0.05)
    return eid


@pytest.mark.parametrize(("button", "result"), [("approve", "shipped"), ("reject", "rejected")])
def test_approve_and_reject_buttons_answer_the_wait(
    page: Any, console: ConsoleStack, button: str, result: str
) -> None:
    from playwright.sync_api import expect

    eid = _waiting(console, approval(f"tests/console/approve_{button}", timeout_s=3600))
    page.goto(f"{console.url}/ui/executions/{eid}")
    expect(page.locator(".approval[data-signal=approval] button")).to_have_count(2)
    page.locator(f"button.btn-{button}").click()
    expect(page.locator("#status")).to_have_text("success")
    expect(page.locator("#result")).to_contain_text(result)
    expect(page.locator("button.btn-approve")).to_have_count(0)
    expect(page.locator("#signal-name")).to_have_count(0)  # nothing waits: no signal form
    events = console.http.get(f"/api/executions/{eid}/events").json()
    received = next(e for e in events if e["name"] == "signal.received")
    data = received["payload"]["data"]
    assert data["approved"] is (button == "approve")
    assert data["by"] and data["by"] != "anonymous"  # who was signed in, not something typed


def test_a_mistyped_signal_is_refused_on_the_page(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    eid = _waiting(console, approval("tests/console/approve_typo", timeout_s=3600))
    page.goto(f"{console.url}/ui/executions/{eid}")
    page.fill("#signal-name", "aproval")
    page.fill("#signal-data", '{"approved": true}')
    page.locator("button.btn-signal").click()
    expect(page.locator("#action-refused")).to_contain_text("it waits for approval")
    expect(page.locator("#status")).to_have_text("running")
    page.locator("button.btn-reject").click()
    expect(page.locator("#status")).to_have_text("success")


def test_schedules_page_lists_pauses_resumes_and_deletes(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    console.register(CHILD)
    name = "nightly-" + uuid.uuid4().hex[:6]
    assert console.http is not None
    r = console.http.post(f"/api/schedules/{name}", json={"path": "tests/console/child", "cron": "0 3 * * *"})
    assert r.status_code in (200, 201), r.text
    page.goto(f"{console.url}/ui/schedules")
    row = page.locator(f'tr[data-schedule="{name}"]')
    expect(row).to_contain_text("tests/console/child")
    expect(row.locator(".next-fires div")).to_have_count(3)
    expect(row.locator(".next-fires div").first).to_contain_text("03:00:00")
    row.locator("button.btn-pause").click()
    expect(row.locator(".schedule-state")).to_have_text("paused")
    expect(row.locator(".next-fires div")).to_have_count(0)
    row.locator("button.btn-resume").click()
    expect(row.locator(".schedule-state")).to_have_text("active")
    row.locator("button.btn-delete").click()  # the confirm dialog is accepted by the fixture
    expect(row).to_have_count(0)


def test_the_start_form_is_typed_from_the_workload(page: Any, console: ConsoleStack) -> None:
    from playwright.sync_api import expect

    from tests.browser.playbooks import DOUBLE

    console.register(DOUBLE)
    page.goto(f"{console.url}/ui/catalog/tests/console/double")
    field = page.locator("#w-n")
    expect(field).to_have_value("1")  # the workload's default
    assert field.get_attribute("type") == "number"
    page.fill("#w-n", "21")
    page.click("form.start button[type=submit]")
    expect(page.locator("#status")).to_have_text("success")
    expect(page.locator("#result")).to_contain_text('"doubled": 42')
    expect(page.locator("pre.json").last).to_contain_text('"n": 21')  # the request payload
