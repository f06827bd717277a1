"""The page's own behaviour on a 1-node quorum, in Chromium: the SSE parser, problem details shown,
the token sent, pausing and resuming the log. (The live federation is in test_dashboard.py.)"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from deploy.launcher import LocalQuorum
from metadata_client.access import write_secret

from .conftest import admin_token

TIMEOUT_MS = 20_000  # a shared 2-core machine: generous, and never a sleep
TOPIC = "T_one"


@pytest.fixture(scope="module")
def node(single_node: LocalQuorum) -> Iterator[LocalQuorum]:
    """The quorum with cluster c9 (no agent, so it will be fenced) and a 1-partition topic on it."""
    token = admin_token(single_node)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = single_node.url(1)
    with httpx.Client(base_url=base, headers=headers, timeout=10) as client:
        r = client.post("/v1/clusters", json={"cluster_id": "c9", "region": "r9", "bootstrap_servers": "127.0.0.1:9"})
        assert r.status_code == 201, r.text
        r = client.post("/v1/topics", json={"name": TOPIC, "region": "r9", "partitions_per_cluster": 1})
        assert r.status_code == 201, r.text
    yield single_node


def open_dashboard(page: Page, quorum: LocalQuorum) -> None:
    page.goto(quorum.url(1) + "/ui/")
    expect(page.get_by_test_id("stream-status")).to_have_text("live", timeout=TIMEOUT_MS)


def test_the_sse_parser_gives_the_same_events_whatever_the_chunking(page: Page, node: LocalQuorum) -> None:
    page.goto(node.url(1) + "/ui/")
    stream = (
        "retry: 1000\n\n: keepalive\n\n"
        'id: 7\nevent: record\ndata: {"offset":7}\n\n'
        "id: 8\r\nevent: record\r\ndata: line one\r\ndata:line two\r\n\r\n"
        "event: gone\rdata: {}\r\r"
        "data: no event name\n\n"
        "data: unterminated"  # no blank line yet: not an event
    )
    results = page.evaluate(
        """async (stream) => {
            const { SSEParser } = await import("./js/sse.js");
            const runs = [];
            for (let size = 1; size <= stream.length; size++) {
                const events = [], retries = [];
                const parser = new SSEParser((e) => events.push(e), (ms) => retries.push(ms));
                for (let i = 0; i < stream.length; i += size) parser.push(stream.slice(i, i + size));
                runs.push({ size, events, retries });
            }
            return runs;
        }""",
        stream,
    )
    expected = [
        {"event": "record", "data": '{"offset":7}', "id": "7"},
        {"event": "record", "data": "line one\nline two", "id": "8"},
        {"event": "gone", "data": "{}", "id": None},
        {"event": "message", "data": "no event name", "id": None},
    ]
    for run in results:
        assert run["events"] == expected, f"chunks of {run['size']}"
        assert run["retries"] == [1000], f"chunks of {run['size']}"


def test_a_refused_write_shows_the_problem_detail_and_sends_the_token(page: Page, node: LocalQuorum) -> None:
    token = admin_token(node) or "any-token"  # without tokens configured the node ignores it
    open_dashboard(page, node)
    cell = page.locator(f'[data-testid="partition-cell"][data-topic="{TOPIC}"][data-partition="0"]')
    # c9 has no agent: its lease runs out and the page shows the fencing record's effect by itself
    expect(cell).to_have_attribute("data-state", "fenced", timeout=TIMEOUT_MS)
    expect(page.locator('[data-testid="cluster-card"][data-cluster="c9"]')).to_have_attribute("data-fenced", "true")

    page.get_by_test_id("token-input").fill(token)
    page.get_by_test_id("token-save").click()
    expect(page.get_by_test_id("token-state")).to_have_text("token set")
    assert page.evaluate("sessionStorage.getItem('kfed.token')") == token
    assert page.get_by_test_id("token-input").input_value() == "", "the token stays out of the field"

    cell.get_by_test_id("partition-readonly").click()
    expect(page.get_by_test_id("confirm-dialog")).to_be_visible()
    with page.expect_request(lambda r: r.method == "PUT") as sent:
        page.get_by_test_id("confirm-ok").click()
    assert sent.value.headers.get("authorization") == f"Bearer {token}"
    assert sent.value.post_data_json == {"state": "read_only"}
    # the only writable partition of its topic: the command refuses, and the page says why
    error = page.get_by_test_id("error")
    expect(error).to_be_visible(timeout=TIMEOUT_MS)
    expect(error).to_contain_text("must keep at least one writable partition")
    expect(cell).to_have_attribute("data-partition-state", "writable")


def test_cancelling_the_confirmation_sends_nothing(page: Page, node: LocalQuorum) -> None:
    open_dashboard(page, node)
    writes: list[str] = []
    page.on("request", lambda r: writes.append(r.url) if r.method != "GET" else None)
    page.locator('[data-testid="cluster-card"][data-cluster="c9"]').get_by_test_id("cluster-decommission").click()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("Decommission cluster c9?")
    page.get_by_test_id("confirm-cancel").click()
    expect(dialog).to_be_hidden()
    # the next poll has gone out and come back: a write sent on cancelling would be before it
    with page.expect_response(re.compile(r"/v1/quorum$"), timeout=TIMEOUT_MS):
        pass
    assert writes == []
    expect(page.locator('[data-testid="cluster-card"][data-cluster="c9"]')).to_have_attribute("data-state", "active")


def test_a_click_held_across_a_refresh_still_opens_the_confirmation(page: Page, node: LocalQuorum) -> None:
    """The panels re-render with every poll. A button replaced between its mousedown and mouseup gets no
    click: on a busy machine the operator's click was lost (and this suite's decommission tests flaked)."""
    open_dashboard(page, node)
    button = page.locator('[data-testid="cluster-card"][data-cluster="c9"]').get_by_test_id("cluster-decommission")
    button.hover()  # the pointer on it (retried by Playwright when a render replaces it meanwhile)
    page.mouse.down()
    # a poll renders while the button is held: the gateways panel, rendered after the clusters', is new
    page.evaluate("() => { window.heldOver = document.querySelector('[data-testid=gateways-body]').firstChild; }")
    page.wait_for_function("() => document.querySelector('[data-testid=gateways-body]').firstChild !== window.heldOver",
                           timeout=TIMEOUT_MS)  # fmt: skip
    page.mouse.up()
    dialog = page.get_by_test_id("confirm-dialog")
    expect(dialog).to_contain_text("Decommission cluster c9?")
    page.get_by_test_id("confirm-cancel").click()
    expect(dialog).to_be_hidden()


def test_the_log_pauses_and_resumes_from_an_offset(page: Page, node: LocalQuorum) -> None:
    open_dashboard(page, node)
    records = page.get_by_test_id("log-record")
    expect(records.first).to_be_visible(timeout=TIMEOUT_MS)
    page.get_by_test_id("log-pause").click()
    expect(page.get_by_test_id("stream-status")).to_have_text("paused")
    expect(page.get_by_test_id("log-resume")).to_be_enabled()

    shown = records.count()
    at_1 = page.locator('[data-testid="log-record"][data-offset="1"]')
    record_at_1 = (at_1.get_attribute("data-type"), at_1.get_attribute("title"))  # its type and its data
    page.get_by_test_id("log-resume-offset").fill("1")
    with page.expect_request(re.compile(r"/v1/log/stream\?offset=1&metadata_version=4$")):
        page.get_by_test_id("log-resume").click()
    expect(page.get_by_test_id("stream-status")).to_have_text("live", timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("log-notice").first).to_have_text("resumed from offset 1")
    # offsets from 1 on were dropped and streamed again (a quiet node: nothing new meanwhile):
    # each shown once, none missing, newest first
    expect(at_1).to_have_attribute("data-type", record_at_1[0] or "")
    assert (at_1.get_attribute("data-type"), at_1.get_attribute("title")) == record_at_1
    expect(records).to_have_count(shown, timeout=TIMEOUT_MS)
    offsets = [int(o) for o in records.evaluate_all("rs => rs.map(r => r.dataset.offset)")]
    assert offsets == list(range(offsets[0], offsets[0] - len(offsets), -1)), offsets


@pytest.fixture
def read_protected(tmp_path: Path) -> Iterator[tuple[LocalQuorum, str]]:
    """A 1-node quorum whose reads need a read token, with cluster c8 registered; and that token."""
    read_token = write_secret(tmp_path / "read.token")
    extra = ("--read-token-file", str(tmp_path / "read.token"))
    with LocalQuorum(tmp_path / "quorum", size=1, extra_args=extra) as q:
        q.wait_ready()
        token = admin_token(q)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        body = {"cluster_id": "c8", "region": "r8", "bootstrap_servers": "127.0.0.1:8"}
        r = httpx.post(q.url(1) + "/v1/clusters", json=body, headers=headers, timeout=10)
        assert r.status_code == 201, r.text
        yield q, read_token


def test_the_page_reads_with_the_token_once_given(page: Page, read_protected: tuple[LocalQuorum, str]) -> None:
    """EventSource cannot send a header: the stream is read with fetch() so that a read token works."""
    q, read_token = read_protected
    page.goto(q.url(1) + "/ui/")  # the page's own files need no token
    expect(page.get_by_test_id("stream-status")).to_have_text("unauthorized", timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("stale")).to_contain_text("Bearer", timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("log-notice").first).to_contain_text("needs a token")

    page.get_by_test_id("token-input").fill(read_token)
    page.get_by_test_id("token-save").click()
    expect(page.get_by_test_id("stream-status")).to_have_text("live", timeout=TIMEOUT_MS)
    expect(page.locator('[data-testid="log-record"][data-type="ClusterRegistered"]')).to_have_count(1)
    expect(page.get_by_test_id("voter")).to_have_count(1, timeout=TIMEOUT_MS)
    expect(page.get_by_test_id("stale")).to_be_hidden(timeout=TIMEOUT_MS)

    # a read token is not an admin token: the node says so and the page shows it
    page.locator('[data-testid="cluster-card"][data-cluster="c8"]').get_by_test_id("cluster-decommission").click()
    page.get_by_test_id("confirm-ok").click()
    expect(page.get_by_test_id("error")).to_contain_text("(HTTP 403)", timeout=TIMEOUT_MS)
    expect(page.locator('[data-testid="cluster-card"][data-cluster="c8"]')).to_have_attribute("data-state", "active")
