"""The dashboard on the real local federation (3 controllers, two Tansu sub-clusters and their agents),
in headless Chromium: it shows U_TopicA over both clusters, follows a broker failure without a reload,
and marks a partition read-only through its confirmation dialog."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Locator, Page, expect

from deploy.launcher import DEMO_TOPIC, LocalFederation

from .conftest import ARTIFACTS, admin_token

TIMEOUT_MS = 30_000  # fencing needs a lease to run out on a shared, slow machine; never a sleep


def cell(page: Page, partition: int) -> Locator:
    return page.locator(f'[data-testid="partition-cell"][data-topic="{DEMO_TOPIC}"][data-partition="{partition}"]')


def cluster_card(page: Page, cluster_id: str) -> Locator:
    return page.locator(f'[data-testid="cluster-card"][data-cluster="{cluster_id}"]')


@pytest.mark.slow
def test_the_dashboard_follows_the_federation_live(fed: LocalFederation, page: Page, tmp_path: Path) -> None:
    # A follower serves the page: its reads are local, /v1/agents, /v1/drain and the write are forwarded.
    leader = fed.quorum.leader()
    node = next(v.id for v in fed.quorum.voters if v.id != leader)
    page.goto(fed.quorum.url(node) + "/ui")
    expect(page.get_by_test_id("stream-status")).to_have_text("live", timeout=TIMEOUT_MS)
    page.evaluate("window.kfedTestMark = 'loaded once'")  # gone if anything reloads the page

    # the seeds' picture: P0-P3 on c1, P4-P7 on c2, all writable
    expect(page.get_by_test_id("partition-cell")).to_have_count(8, timeout=TIMEOUT_MS)
    for p in range(8):
        expect(cell(page, p)).to_have_attribute("data-cluster", "c1" if p < 4 else "c2")
        expect(cell(page, p)).to_have_attribute("data-state", "writable", timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("voter")).to_have_count(3)
    # one leader (not necessarily the one seen above: an election may run on a loaded machine)
    expect(page.locator('[data-testid="voter"][data-role="leader"]')).to_have_count(1, timeout=TIMEOUT_MS)
    for cluster_id in ("c1", "c2"):
        expect(cluster_card(page, cluster_id)).to_have_attribute("data-fenced", "false")
        expect(cluster_card(page, cluster_id).get_by_test_id("agent-applied")).to_be_visible(timeout=TIMEOUT_MS)

    # a sub-cluster dies: its partitions turn fenced in place, the others stay writable
    fed.clusters["c2"].kill_broker()
    for p in range(4, 8):
        expect(cell(page, p)).to_have_attribute("data-state", "fenced", timeout=TIMEOUT_MS)
    for p in range(4):
        expect(cell(page, p)).to_have_attribute("data-state", "writable")
    expect(cluster_card(page, "c2")).to_have_attribute("data-fenced", "true")
    expect(cluster_card(page, "c2").get_by_test_id("cluster-health")).to_contain_text("fenced since")
    fenced_record = page.locator('[data-testid="log-record"][data-type="ClusterFenced"]')
    expect(fenced_record.filter(has_text="c2")).to_have_count(1, timeout=TIMEOUT_MS)

    # an operator marks P1 read-only: token, button, confirmation; the record arrives in the live log
    token = admin_token(fed.quorum)
    if token is not None:
        page.get_by_test_id("token-input").fill(token)
        page.get_by_test_id("token-save").click()
        expect(page.get_by_test_id("token-state")).to_have_text("token set")
    cell(page, 1).get_by_test_id("partition-readonly").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text(f"Set {DEMO_TOPIC} P1 read-only?")
    page.get_by_test_id("confirm-ok").click()
    expect(dialog).to_be_hidden()
    changed = page.locator('[data-testid="log-record"][data-type="PartitionStateChanged"]')
    expect(changed.filter(has_text=f"{DEMO_TOPIC} P1 → read_only")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("notice")).to_contain_text("committed at offset")
    expect(page.get_by_test_id("error")).to_be_hidden()
    # read_only, or already removed when the agent finds nothing left to drain (nobody wrote to it)
    expect(cell(page, 1)).to_have_attribute("data-state", re.compile(r"^(read_only|removed)$"), timeout=TIMEOUT_MS)
    expect(cell(page, 0)).to_have_attribute("data-state", "writable")
    assert page.evaluate("window.kfedTestMark") == "loaded once", "the page was reloaded"

    page.evaluate("window.scrollTo(0, 0)")  # the sticky log panel sits at the top in a full-page shot
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=shot, full_page=True)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "dashboard.png")
