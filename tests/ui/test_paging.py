"""The dashboard on a crowded federation, in Chromium: thousands of topics (``KFED_UI_TOPICS``: 2,000 in
``make test``, 10,000 in ``make test-ui-scale``; creating them through the API is most of the time), one of
them with 10,000 partitions. The page reads and shows a page of topics at a time (found by a name prefix) and
a page of each topic's partitions, never the whole federation."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from playwright.sync_api import Page, expect

from deploy.launcher import LocalQuorum

from .conftest import admin_token

TIMEOUT_MS = 30_000
SMALL_TOPICS = int(os.environ.get("KFED_UI_TOPICS", "2000"))
BIG = "big"  # named before every t*: the first topic shown
BIG_PARTITIONS = 10_000
TOPICS_PER_PAGE = 20  # controller/ui/js/app.js
PARTITIONS_PER_PAGE = 200
DASH = "\N{EN DASH}"  # of the range shown: P0, the dash, P199 of 10,000


async def _create_topics(base: str, headers: dict[str, str], names: list[str]) -> None:
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=60) as client:
        pending = iter(names)

        async def worker() -> None:
            for name in pending:
                body = {"name": name, "region": "r9", "partitions_per_cluster": 1}
                r = await client.post("/v1/topics", json=body, headers={"Idempotency-Key": f"create-{name}"})
                assert r.status_code == 201, r.text

        await asyncio.gather(*(worker() for _ in range(32)))


@pytest.fixture(scope="module")
def crowded(single_node: LocalQuorum) -> Iterator[LocalQuorum]:
    """Cluster c9 with ``big`` (10,000 partitions) and ``SMALL_TOPICS`` one-partition topics ``t00000``, ..."""
    token = admin_token(single_node)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = single_node.url(1)
    stop = threading.Event()
    with httpx.Client(base_url=base, headers=headers, timeout=60) as client:
        r = client.post("/v1/clusters", json={"cluster_id": "c9", "region": "r9", "bootstrap_servers": "127.0.0.1:9"})
        assert r.status_code == 201, r.text
        # c9 has no agent: this test beats for it, so that its lease holds (topics are placed on live clusters)
        beating = threading.Thread(target=_beat, args=(client, stop), daemon=True)
        beating.start()
        try:
            r = client.post("/v1/topics", json={"name": BIG, "region": "r9", "partitions_per_cluster": BIG_PARTITIONS})
            assert r.status_code == 201, r.text
            names = [f"t{i:05d}" for i in range(SMALL_TOPICS)]
            with ThreadPoolExecutor(1) as thread:  # this one runs Playwright's event loop (conftest.headless_chromium)
                thread.submit(asyncio.run, _create_topics(base, headers, names)).result()
            yield single_node
        finally:
            stop.set()
            beating.join()


def _beat(client: httpx.Client, stop: threading.Event) -> None:
    while not stop.wait(0.5):
        client.post("/v1/agents/c9/heartbeat", json={"healthy": True})


def shown_topics(page: Page) -> list[str]:
    return page.get_by_test_id("topic").evaluate_all("(els) => els.map((e) => e.dataset.topic)")


@pytest.mark.slow  # creating the topics through the API takes most of its time
def test_the_dashboard_pages_through_thousands_of_topics_and_a_ten_thousand_partition_topic(
    page: Page, crowded: LocalQuorum
) -> None:
    page.goto(crowded.url(1) + "/ui/")
    topics = page.get_by_test_id("topic")
    expect(topics).to_have_count(TOPICS_PER_PAGE, timeout=TIMEOUT_MS)
    assert shown_topics(page) == [BIG, *(f"t{i:05d}" for i in range(TOPICS_PER_PAGE - 1))]

    # the big topic: a page of its partitions, then the next one
    big = page.locator(f'[data-testid="topic"][data-topic="{BIG}"]')
    expect(big.get_by_test_id("partitions-range")).to_have_text(f"P0{DASH}P{PARTITIONS_PER_PAGE - 1} of 10,000")
    expect(big.get_by_test_id("partition-cell")).to_have_count(PARTITIONS_PER_PAGE)
    expect(big.get_by_test_id("partitions-prev")).to_be_disabled()
    big.get_by_test_id("partitions-next").click()
    expect(big.get_by_test_id("partitions-range")).to_have_text(
        f"P{PARTITIONS_PER_PAGE}{DASH}P{2 * PARTITIONS_PER_PAGE - 1} of 10,000", timeout=TIMEOUT_MS
    )
    first_cell = big.get_by_test_id("partition-cell").first
    expect(first_cell).to_have_attribute("data-partition", str(PARTITIONS_PER_PAGE))
    expect(big.get_by_test_id("partition-cell")).to_have_count(PARTITIONS_PER_PAGE)

    # the next page of topics, and back
    page.get_by_test_id("topics-next").click()
    expect(topics.first).to_have_attribute("data-topic", f"t{TOPICS_PER_PAGE - 1:05d}", timeout=TIMEOUT_MS)
    expect(topics).to_have_count(TOPICS_PER_PAGE)
    page.get_by_test_id("topics-prev").click()
    expect(topics.first).to_have_attribute("data-topic", BIG, timeout=TIMEOUT_MS)
    expect(big.get_by_test_id("partitions-range")).to_contain_text(f"P{PARTITIONS_PER_PAGE}{DASH}")  # kept its page

    # found by prefix: the last ten topics, no next page; then a prefix nothing has
    prefix = f"t{SMALL_TOPICS // 10 - 1:04d}"
    page.get_by_test_id("topic-search").fill(prefix)
    expect(topics).to_have_count(10, timeout=TIMEOUT_MS)
    assert shown_topics(page) == [f"{prefix}{i}" for i in range(10)]
    expect(page.get_by_test_id("topics-next")).to_be_disabled()
    expect(page.get_by_test_id("topics-prev")).to_be_disabled()
    page.get_by_test_id("topic-search").fill("nothing")
    expect(page.get_by_test_id("topics-empty")).to_contain_text("No logical topic starts with", timeout=TIMEOUT_MS)
