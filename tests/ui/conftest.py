"""The dashboard (``/ui``) in real headless Chromium, driven by Playwright's sync API, against real
controller processes. Debian's ``chromium`` is used as is (``make browser`` installs it); Playwright
downloads no browser."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from deploy.launcher import BrokerKind, BrokerSource, LocalFederation, LocalQuorum, ready_demo_topic

CHROMIUM = os.environ.get("KFED_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",  # tests may run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # Without these, chromium's own background connections are refused on a closed network and
    # stall it; the dashboard needs none of them.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "var" / "artifacts"  # git-ignored (var/)


def admin_token(quorum: LocalQuorum) -> str | None:
    """The quorum's admin token when its nodes require one (``LocalQuorum.admin_token``), else None."""
    return quorum.admin_token


def headless_chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, until the generator is closed. Playwright's sync API keeps an event loop
    running in this thread while it is open: pytest-asyncio's tests cannot run their own loop until it is
    closed, so a fixture made of this must end before any async test runs (package or module scope, never
    session; ``tests/conftest.py`` fails a test that leaves a loop running)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (make browser installs Debian's)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    yield from headless_chromium()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page (own context: empty sessionStorage) at 1280x800; the test fails on any uncaught
    script error in it."""
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    yield page
    context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


@pytest.fixture
def fed(tmp_path: Path, broker: BrokerKind, lend_brokers: BrokerSource | None) -> Iterator[LocalFederation]:
    """The local federation (c1 and c2 in r1, their agents) with the demo topic writable on both."""
    with LocalFederation(tmp_path, broker=broker, lend_brokers=lend_brokers) as federation:
        ready_demo_topic(federation)
        yield federation


@pytest.fixture(scope="module")
def single_node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalQuorum]:
    """A 1-node quorum: enough to serve the static files and a page with nothing registered yet."""
    with LocalQuorum(tmp_path_factory.mktemp("quorum"), size=1) as q:
        q.wait_ready()
        yield q
