"""The dashboard shows the gateway instances: live or gone, their connections and requests per second."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from deploy.launcher import LocalFederation
from tests.ui.conftest import headless_chromium, page  # noqa: F401 - the dashboard tests' page fixture

from .conftest import Gateways

pytestmark = pytest.mark.slow
TIMEOUT_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """This module's own browser, closed at its end: the gateway tests after it run event loops."""
    yield from headless_chromium()


def test_the_dashboard_shows_each_gateway_live_and_then_gone(
    fed: LocalFederation,
    gateways: Gateways,
    gateway: str,
    page: Page,  # noqa: F811 - the fixture imported above
) -> None:
    second = gateways.start()
    page.goto(fed.quorum.url(1) + "/ui")
    rows = page.get_by_test_id("gateway-row")
    expect(rows).to_have_count(2, timeout=TIMEOUT_MS)
    for address in (gateway, second):
        row = rows.filter(has_text=address)
        expect(row).to_have_attribute("data-live", "true", timeout=TIMEOUT_MS)
        expect(row).to_contain_text("PLAINTEXT")
    gateways.kill(second)
    expect(rows.filter(has_text=second)).to_have_attribute("data-live", "false", timeout=TIMEOUT_MS)
    expect(rows.filter(has_text=gateway)).to_have_attribute("data-live", "true")
    expect(rows.filter(has_text=gateway).locator("td").nth(5)).not_to_have_text("—", timeout=TIMEOUT_MS)
