"""Chromium (Debian's package, driven by Playwright) against a real server, worker and nats-server.

Playwright's own browser download is not used: clusters and CI machines are often offline, and
Debian's ``chromium`` is one ``apt-get install`` away. Without it (and without root to install
it) the browser tests are skipped with the reason, never failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from noetl.host.natsserver import NatsServer
from tests.browser.stack import ConsoleStack

CHROMIUM = "/usr/bin/chromium"


def ensure_chromium() -> str | None:
    """The browser's path, installing Debian's package when we may; None when it cannot be had."""
    if Path(CHROMIUM).exists():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "install", "-y", "-q", "chromium"],
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "chromium"],
    ):
        if Path(CHROMIUM).exists():
            break
        subprocess.run(cmd, env=env, check=False, capture_output=True, timeout=900)
    return CHROMIUM if Path(CHROMIUM).exists() else None


@pytest.fixture(scope="session")
def chromium() -> str:
    path = ensure_chromium()
    if path is None:
        pytest.skip(f"no {CHROMIUM}: install Debian's chromium package (apt-get install chromium) as root")
    return path


@pytest.fixture(scope="module")
def browser(chromium: str) -> Iterator[Any]:
    """Module-scoped: Playwright's sync API keeps its event loop marked as running in this thread
    until it exits, and an asyncio test after it would find a loop already running."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the test extra)")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="module")
def console(nats_server: NatsServer) -> Iterator[ConsoleStack]:
    stack = ConsoleStack(nats_server.url).start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture
def page(browser: Any, console: ConsoleStack) -> Iterator[Any]:
    """A signed-in page: the token link sets the session cookie, as `noetl run --ui` prints it."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(15_000)
    pg = context.new_page()
    pg.on("dialog", lambda dialog: dialog.accept())
    pg.goto(f"{console.url}/ui/login?token={console.token}")
    try:
        yield pg
    finally:
        context.close()
