"""The fault harness end to end: a short fixed-seed subset (in the default suite) and the proxy's cut.

Seeds 12 and 38 start with cut, leader kill mid-batch, restart of all nodes (12) and kill -9, pause, cut
(38): together every fault of the catalogue within ~10 s each. Longer runs: ``make faults SEED=… DURATION=…``.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .cluster import NODE_IDS, FaultQuorum
from .run import run

FIXED_SEEDS = (12, 38)
DURATION_S = 10


@pytest.mark.parametrize("seed", FIXED_SEEDS)
def test_fixed_seed_run_has_no_anomaly(seed: int, tmp_path: Path) -> None:
    result = run(seed, DURATION_S, tmp_path)
    assert result.summary is not None, result.report()
    assert result.faults, "no fault was applied"
    assert result.summary.acknowledged > 0 and result.summary.tail_records > 0
    assert result.anomalies == [], result.report()


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
        # Still isolated: it never learns of the new leader while cut.
        time.sleep(1.5)
        assert q.node_status(leader)["leader_id"] in (None, leader)  # type: ignore[index]
        q.heal(leader)
        q.wait_ready(60)
        assert {q.node_status(n)["leader_id"] for n in NODE_IDS} != {None}  # type: ignore[index]
    finally:
        q.stop()
