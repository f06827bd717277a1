"""Real faults on real processes: kill -9 of the leader, restarts, retention below the window, damaged files.

Each test has its own quorum. A writer records every acknowledged write; afterwards every node's log must
hold each acknowledged write exactly once, with gap-free offsets, identical on every node.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from deploy.launcher import LocalQuorum
from kfed.cli import main as kfed
from metadata_client.client import READS, ControllerClient
from metadata_client.follower import LogFollower
from metadata_log.errors import KfedError
from metadata_log.views import metadata_view
from tests.waiting import wait_until

from .conftest import log_of

pytestmark = pytest.mark.slow


class Writer(threading.Thread):
    """Registers clusters c-<n> one by one, retrying through the client; records what was acknowledged."""

    def __init__(self, q: LocalQuorum, prefix: str) -> None:
        super().__init__(daemon=True)
        self.client = q.controller_client(deadline_s=20)
        self.prefix = prefix
        self.acked: dict[str, int] = {}  # cluster id -> committed offset
        self.failed: list[str] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop_flag.is_set():
            cluster_id = f"{self.prefix}-{n}"
            try:
                reply = self.client.post(
                    "/v1/clusters", {"cluster_id": cluster_id, "region": "r1", "bootstrap_servers": "127.0.0.1:1"}
                )
                self.acked[cluster_id] = reply["offset"]
            except KfedError:
                self.failed.append(cluster_id)  # unknown outcome: may or may not be in the log
            n += 1

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(30)
        self.client.close()


def assert_history_holds(q: LocalQuorum, writer: Writer, node_ids: list[int]) -> None:
    # The leader keeps writing after the writer stops (the clusters the writer registered have no agent,
    # so their leases expire and they are fenced): compare the nodes over the prefix they all hold, which
    # must reach past every acknowledged write.
    logs = [log_of(q, n) for n in node_ids]
    common = min(len(log) for log in logs)
    assert common > max(writer.acked.values(), default=-1), "a node does not hold every acknowledged write"
    logs = [log[:common] for log in logs]
    assert all(log == logs[0] for log in logs), "nodes disagree on the log"
    assert [r["offset"] for r in logs[0]] == list(range(len(logs[0]))), "offsets are not gap-free"
    registered = [r["data"]["cluster_id"] for r in logs[0] if r["type"] == "ClusterRegistered"]
    assert len(registered) == len(set(registered)), "a write was applied twice"
    by_id = {r["data"]["cluster_id"]: r["offset"] for r in logs[0] if r["type"] == "ClusterRegistered"}
    for cluster_id, offset in writer.acked.items():
        assert by_id.get(cluster_id) == offset, f"acknowledged {cluster_id}@{offset} is not in the log"


def test_leader_kill9_loses_no_acknowledged_write_and_restarted_node_catches_up(make_quorum) -> None:
    q = make_quorum()
    writer = Writer(q, "k")
    writer.start()
    time.sleep(1.5)
    old_leader = q.leader()
    acked_before_kill = len(writer.acked)
    q.kill(old_leader)
    killed_at = time.monotonic()
    new_leader = q.leader(exclude=old_leader, timeout_s=10)
    assert new_leader != old_leader
    wait_until(  # within 15 s of the kill
        lambda: len(writer.acked) > acked_before_kill + 5, killed_at + 15 - time.monotonic(), "writes after the kill"
    )
    q.start(old_leader)  # same data dir
    time.sleep(1.5)
    writer.finish()
    last = max(writer.acked.values())
    q.wait_applied(last, timeout_s=30)
    assert_history_holds(q, writer, [1, 2, 3])
    terms = {q.node(n)["term"] for n in (1, 2, 3)}
    assert len(terms) == 1 and terms.pop() >= 2


def test_restart_of_all_nodes_keeps_every_acknowledged_write(make_quorum) -> None:
    # A low compaction threshold makes the nodes dump their state several times: the restart then
    # loads a dump and replays the journal after it.
    # No agent runs: without a long lease the restarted leader fences the registered clusters once their
    # first lease runs out (3 s), which a slow restart can reach before the metadata is compared.
    q = make_quorum("--compaction-min-entries", "50", "--compaction-period-s", "3", "--lease-ms", "3600000")
    writer = Writer(q, "r")
    writer.start()
    wait_until(lambda: len(writer.acked) >= 400, 60, "400 writes acknowledged")
    wait_until(
        lambda: all((q.data_dir / f"node-{n}" / "raft.dump").exists() for n in (1, 2, 3)), 20, "every node dumped"
    )
    writer.finish()
    before = q.client.get(q.url(1) + "/v1/metadata", params={"min_offset": max(writer.acked.values())}).json()
    for n in (1, 2, 3):
        q.kill(n)
    q.start()
    q.leader(timeout_s=20)
    q.wait_applied(before["offset"], timeout_s=30)
    after = q.client.get(q.url(2) + "/v1/metadata").json()
    assert after == before
    # the quorum still takes writes after the restart
    with q.controller_client() as c:
        reply = c.post("/v1/clusters", {"cluster_id": "after", "region": "r1", "bootstrap_servers": "127.0.0.1:1"})
    assert reply["offset"] == before["offset"] + 1


def test_reader_below_the_window_gets_410_and_recovers_through_the_snapshot(make_quorum) -> None:
    # No agent runs: with the default 3 s lease, clusters registered more than a lease before the end would be
    # fenced meanwhile on a loaded machine, and those records would move the window this test measures.
    q = make_quorum("--retention-records", "20", "--lease-ms", "3600000")
    base = q.node(1)["high_watermark"]  # the quorum's own records so far (its metadata version)
    with q.controller_client() as c:
        for i in range(10):
            c.post("/v1/clusters", {"cluster_id": f"w{i}", "region": "r1", "bootstrap_servers": "127.0.0.1:1"})
        early = LogFollower(q.urls, wait_ms=0)
        early.poll()
        assert early.image.offset == base + 9 and early.snapshots_loaded == 1
        for i in range(10, 100):
            c.post("/v1/clusters", {"cluster_id": f"w{i}", "region": "r1", "bootstrap_servers": "127.0.0.1:1"})
    last = base + 99
    q.wait_applied(last)
    r = q.client.get(q.url(1) + "/v1/log", params={"offset": base + 10})
    assert r.status_code == 410 and r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert base + 10 < problem["log_start_offset"] <= last + 1 - 20
    assert problem["snapshot_offset"] == last
    # the follower that was at offset base + 9 falls below the window: it reloads the snapshot and goes on
    deadline = time.monotonic() + 30
    while early.poll() or early.image.offset < last:
        assert time.monotonic() < deadline, f"the follower reached {early.image.offset}, not {last}, within 30 s"
    assert early.snapshots_loaded == 2
    assert metadata_view(early.image) == q.client.get(q.url(1) + "/v1/metadata").json()
    snapshot = q.client.get(q.url(2) + "/v1/snapshot", params=READS).json()
    assert snapshot["offset"] == last
    assert len([r for r in snapshot["records"] if r["type"] == "ClusterRegistered"]) == 100
    early.stop()


def test_damaged_dump_stops_the_node_with_a_clear_error(make_quorum) -> None:
    q = make_quorum("--compaction-min-entries", "20", "--compaction-period-s", "3")
    with q.controller_client() as c:
        for i in range(60):
            c.post("/v1/clusters", {"cluster_id": f"d{i}", "region": "r1", "bootstrap_servers": "127.0.0.1:1"})
    dumps = [q.data_dir / f"node-{n}" / "raft.dump" for n in (1, 2, 3)]
    wait_until(lambda: any(d.exists() for d in dumps), 20, "a node wrote a dump")
    node = next(n for n, d in zip((1, 2, 3), dumps, strict=True) if d.exists())
    q.kill(node)
    dump = dumps[node - 1]
    data = bytearray(dump.read_bytes())
    data[len(data) // 2] ^= 0xFF
    dump.write_bytes(bytes(data))
    result = subprocess.run(
        [sys.executable, "-m", "kfed", "controller", "--config", str(q.data_dir / "quorum.toml"),
         "--node-id", str(node), "--data-dir", str(dump.parent), "--insecure"],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "checksum mismatch" in result.stderr and "Refusing to start" in result.stderr


def test_unknown_outcome_retried_with_the_same_key_applies_once(make_quorum, tmp_path: Path) -> None:
    q = make_quorum()
    key = str(uuid.uuid4())
    body = {"cluster_id": "once", "region": "r1", "bootstrap_servers": "127.0.0.1:1"}
    leader = q.leader()
    first = q.client.post(q.url(leader) + "/v1/clusters", json=body, headers={"Idempotency-Key": key})
    assert first.status_code == 201
    q.kill(leader)  # the client never learns... and retries elsewhere with the same key
    with ControllerClient([u for v, u in zip(q.voters, q.urls, strict=True) if v.id != leader], access=q.access) as c:
        again = c.post("/v1/clusters", body, idempotency_key=key)
    assert again["offset"] == first.json()["offset"]
    survivors = [v.id for v in q.voters if v.id != leader]
    registered = [r for r in log_of(q, survivors[0]) if r["type"] == "ClusterRegistered"]
    assert len(registered) == 1


def test_commit_timeout_is_504_and_the_same_key_then_returns_the_outcome(make_quorum) -> None:
    q = make_quorum("--commit-timeout-ms", "1")  # shorter than any commit: every write times out first
    leader = q.url(q.leader())
    base = q.node(q.leader())["high_watermark"]  # the quorum's own records so far (its metadata version)
    body = {"cluster_id": "slow", "region": "r1", "bootstrap_servers": "127.0.0.1:1"}
    key = {"Idempotency-Key": "retry-me"}
    r = q.client.post(leader + "/v1/clusters", json=body, headers=key)
    assert r.status_code == 504 and r.headers["content-type"] == "application/problem+json"
    assert "Idempotency-Key" in r.json()["detail"]
    # 504 means "unknown": the write may commit after the reply, or (when the caller gave up before it was
    # proposed) never. Retrying with the same key settles it: once one attempt committed, the next answers
    # that outcome without committing again.
    deadline = time.monotonic() + 30
    while (again := q.client.post(leader + "/v1/clusters", json=body, headers=key)).status_code == 504:
        assert time.monotonic() < deadline, "no attempt committed within 30 s"
        time.sleep(0.1)
    assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
    assert again.json()["offset"] == base
    q.wait_applied(base)  # every node, not only the leader that answered
    assert all(len(log_of(q, v.id)) == base + 1 for v in q.voters)


def test_no_leader_is_503_with_retry_after(make_quorum) -> None:
    q = make_quorum()
    leader = q.leader()
    others = [v.id for v in q.voters if v.id != leader]
    q.kill(others[0])
    q.kill(others[1])
    survivor = q.url(leader)
    deadline = time.monotonic() + 10
    while True:  # the lone leader steps down within an election timeout (CheckQuorum)
        r = q.client.post(
            survivor + "/v1/clusters", json={"cluster_id": "x", "region": "r1", "bootstrap_servers": "h:1"}
        )
        if r.status_code == 503:
            break
        assert time.monotonic() < deadline, f"still {r.status_code} after 10 s"
        time.sleep(0.2)
    assert r.headers["content-type"] == "application/problem+json"
    assert int(r.headers["retry-after"]) >= 1
    ready = q.client.get(survivor + "/readyz")
    assert ready.status_code == 503


def test_a_follower_cut_off_from_the_quorum_answers_reads_but_confirms_nothing(make_quorum) -> None:
    """A reader of a follower whose leader and other peer are paused still gets pages, but not confirmation that
    its image is current (``current_ms_ago`` grows or is null): a strict producer's key-order lease, and the
    gateway's, lapse instead of routing by a map the quorum may have replaced. Confirmed again once it hears its
    leader."""
    q = make_quorum()
    leader = q.leader()
    follower, other = [v.id for v in q.voters if v.id != leader]
    reader = LogFollower(q.url(follower), wait_ms=200)

    def confirmed_within(seconds: float) -> bool:
        reader.poll()
        return time.monotonic() - reader.confirmed_at < seconds

    wait_until(lambda: confirmed_within(1.0), 10, "the follower's pages confirm the reader's image")
    for node in (leader, other):
        q.kill(node, signal.SIGSTOP)
    try:
        cut_at = time.monotonic()
        pages = 0
        while time.monotonic() < cut_at + 4.0:
            reader.poll()  # answered: the follower itself runs
            pages += 1
        assert pages > 5
        assert reader.confirmed_at < cut_at, "a cut-off follower confirmed the reader's image"
    finally:
        for node in (leader, other):
            q.kill(node, signal.SIGCONT)
    wait_until(lambda: confirmed_within(1.0), 20, "confirmed again once the follower hears its leader")
    reader.stop()


def test_replacing_a_controller_under_write_load_loses_nothing(make_quorum) -> None:
    q = make_quorum()
    writer = Writer(q, "m")
    writer.start()
    time.sleep(1.0)
    new = q.add_node()
    wait_until(lambda: q.node(new.id), 20, "the joining node answers")
    urls = ",".join(q.urls)
    assert kfed(["quorum", "add-voter", "--id", str(new.id), "--raft", new.raft, "--http", new.http,
                 "--controller", urls, *q.token_args]) == 0  # fmt: skip
    q.wait_applied(max(writer.acked.values()), node_ids=[new.id], timeout_s=30)
    leaving = next(n for n in (1, 2, 3) if n != q.leader())
    assert kfed(["quorum", "remove-voter", "--id", str(leaving), "--controller", urls, *q.token_args]) == 0
    q.kill(leaving)
    acked_at_removal = len(writer.acked)
    time.sleep(1.5)
    writer.finish()
    assert len(writer.acked) > acked_at_removal + 10, "writes stopped after the replacement"
    staying = [n for n in (1, 2, 3, new.id) if n != leaving]
    q.wait_applied(max(writer.acked.values()), node_ids=staying, timeout_s=30)
    assert_history_holds(q, writer, staying)
    voters = q.client.get(q.url(staying[0]) + "/v1/quorum").json()["voters"]
    assert sorted(v["id"] for v in voters) == staying

    def every_voter_leads_or_follows() -> bool:  # a peer slow to answer its status shows as "unreachable" once
        roles = [v["role"] for v in q.client.get(q.url(staying[0]) + "/v1/quorum").json()["voters"]]
        return all(role in ("leader", "follower") for role in roles)

    wait_until(every_voter_leads_or_follows, 30, "every voter left leads or follows")
    assert kfed(["quorum", "remove-voter", "--id", str(leaving), "--controller", urls, *q.token_args]) == 0, (
        "re-run: no-op"
    )
