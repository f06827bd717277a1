"""The fault harness end to end: an explicit schedule of every fault (in the default suite) and the proxy's cut.

The schedule applies each fault of the catalogue once, in a fixed order; the seed fixes only targets and
hold times. The test asserts that each fault ran and that the paths they exist for were taken: a retry
with the same Idempotency-Key after an unknown outcome (answered from the first outcome), and a tailer's
410 followed by a snapshot. Longer runs: ``make faults SEED=… DURATION=…``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .cluster import NODE_IDS, FaultQuorum
from .run import FAULTS, SCHEDULE, run

SEED = 12


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_explicit_schedule_runs_every_fault_and_finds_no_anomaly(tmp_path: Path) -> None:
    assert set(SCHEDULE) == set(FAULTS), "the schedule must cover the whole catalogue"
    result = run(SEED, 0, tmp_path, schedule=SCHEDULE)
    assert result.summary is not None, result.report()
    assert result.faults == list(SCHEDULE), result.report()
    faults_recorded = [line for line in (tmp_path / "history.jsonl").read_text().splitlines() if '"op":"fault"' in line]
    for fault in SCHEDULE:
        assert any(f'"kind":"{fault}"' in line for line in faults_recorded), f"{fault} never ran"
    s = result.summary
    assert s.acknowledged > 0 and s.tail_records > 0
    assert s.retried_after_unknown > 0 and s.replayed > 0, "no same-key retry answered from a first outcome"
    assert s.gone > 0 and s.snapshots_loaded > 0, "no tailer went through 410 and the snapshot"
    assert result.anomalies == [], result.report()


SECURE_SCHEDULE = ("kill", "cut", "restart_all")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_short_schedule_with_the_raft_secret_and_admin_token_finds_no_anomaly(tmp_path: Path) -> None:
    """The encrypted, authenticated Raft path (the default) under faults: a kill, a cut and a restart of every
    node, with the writers and the heartbeater sending the admin token."""
    result = run(SEED, 0, tmp_path, schedule=SECURE_SCHEDULE, agents=0, secure=True)
    assert result.summary is not None, result.report()
    assert result.faults == list(SECURE_SCHEDULE), result.report()
    assert result.summary.acknowledged > 0 and result.summary.tail_records > 0, result.report()
    assert result.anomalies == [], result.report()
    logs = [(tmp_path / f"node-{n}.log").read_text() for n in NODE_IDS]
    assert not any("INSECURE" in text for text in logs)  # every start was a secured one
    assert not any("dropped a Raft connection" in text for text in logs)  # every frame decrypted and decoded


def test_cut_isolates_exactly_one_node(tmp_path: Path) -> None:
    q = FaultQuorum(tmp_path)
    try:
        q.start()
        q.wait_ready(90)
        leader = q.wait_leader(30)
        term = q.node_status(leader)["term"]  # type: ignore[index]
        q.cut(leader)
        deadline = time.monotonic() + 30
        while True:  # the isolated leader steps down (CheckQuorum); the other two elect one of them
            status = {n: q.node_status(n) for n in NODE_IDS}
            others = [n for n in NODE_IDS if n != leader and status[n] and status[n]["role"] == "leader"]  # type: ignore[index]
            if others and status[leader] and status[leader]["role"] != "leader":  # type: ignore[index]
                break
            assert time.monotonic() < deadline, f"no failover while node {leader} was cut: {status}"
            time.sleep(0.1)
        assert status[others[0]]["term"] > term  # type: ignore[index]
        assert q.proxies.unattributed == 0
        # Still isolated: it never learns of the new leader while cut. Checked after the nodes retried their
        # links to it (every 0.5 s) for several rounds and were refused, not after a guessed sleep.
        refused = q.proxies.refused
        deadline = time.monotonic() + 30
        while q.proxies.refused < refused + 6:
            assert time.monotonic() < deadline, "no connection to the cut node was attempted within 30 s"
            time.sleep(0.1)
        assert q.node_status(leader)["leader_id"] in (None, leader)  # type: ignore[index]
        q.heal(leader)
        q.wait_ready(60)
        assert {q.node_status(n)["leader_id"] for n in NODE_IDS} != {None}  # type: ignore[index]
    finally:
        q.stop()
