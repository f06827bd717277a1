"""Leases (soft state on the leader) turn into fencing records only on change; group generations follow
members and partitions."""

from __future__ import annotations

from controller.groups import GroupCoordinator
from controller.leases import LEASE_EXPIRED, LeaseTable
from metadata_log.image import apply
from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    GroupMember,
    PartitionStateChanged,
)

from ..samples import two_clusters

BASE = two_clusters()


def test_a_new_leader_gives_every_agent_one_lease_before_fencing() -> None:
    leases = LeaseTable(lease_ms=3000)
    leases.start_term(now_s=100.0)
    assert leases.decide(BASE, now_s=102.9, now_ms=1) == []
    assert leases.decide(BASE, now_s=103.0, now_ms=7) == [
        ClusterFenced("c1", LEASE_EXPIRED, 7),
        ClusterFenced("c2", LEASE_EXPIRED, 7),
    ]


def test_heartbeats_keep_a_cluster_unfenced_and_no_records_are_made_for_them() -> None:
    leases = LeaseTable(lease_ms=3000)
    leases.start_term(now_s=0.0)
    for beat in range(100):
        now = beat * 0.5
        leases.beat("c1", True, None, 5, now, 0)
        leases.beat("c2", True, None, 5, now, 0)
        assert leases.decide(BASE, now, 0) == []


def test_expiry_and_reported_failure_fence_and_recovery_unfences() -> None:
    leases = LeaseTable(lease_ms=3000)
    leases.start_term(now_s=0.0)
    leases.beat("c1", True, None, 5, 1.0, 0)
    leases.beat("c2", False, "probe failed", 5, 1.0, 0)
    assert leases.decide(BASE, 1.1, 9) == [ClusterFenced("c2", "probe failed", 9)]
    # by t=4 both leases ran out: expiry wins over the last health report
    assert leases.decide(BASE, 4.0, 10) == [
        ClusterFenced("c1", LEASE_EXPIRED, 10),
        ClusterFenced("c2", LEASE_EXPIRED, 10),
    ]
    fenced = apply(BASE, [ClusterFenced("c1", LEASE_EXPIRED, 10), ClusterFenced("c2", "probe failed", 10)])
    assert leases.decide(fenced, 4.0, 11) == []  # already fenced: nothing more
    leases.beat("c2", True, None, 6, 4.5, 0)
    assert leases.decide(fenced, 4.6, 12) == [ClusterUnfenced("c2", 12)]


def test_a_new_reason_from_the_agent_of_a_fenced_cluster_is_recorded_without_unfencing_it() -> None:
    leases = LeaseTable(lease_ms=3000)
    leases.start_term(now_s=0.0)
    leases.beat("c1", True, None, 5, 1.0, 0)
    fenced = apply(BASE, [ClusterFenced("c2", "cluster unreachable: down", 1)])
    leases.beat("c2", False, "cluster unreachable: down", 5, 1.0, 0)
    assert leases.decide(fenced, 1.1, 2) == [], "the same reason again: nothing new to record"
    leases.beat("c2", False, "cluster came back empty", 5, 1.5, 0)
    refenced = [ClusterUnfenced("c2", 3), ClusterFenced("c2", "cluster came back empty", 3)]
    assert leases.decide(fenced, 1.6, 3) == refenced  # committed as one batch: no reader sees c2 unfenced
    after = apply(fenced, refenced)
    assert after.clusters["c2"].fenced and after.clusters["c2"].fenced_reason == "cluster came back empty"
    assert leases.decide(after, 1.7, 4) == []
    leases.beat("c1", True, None, 5, 4.5, 0)
    assert leases.decide(after, 5.0, 5) == [], "c2's lease expired: the agent's last reason stays on record"


def test_decommissioned_clusters_are_not_fenced() -> None:
    image = apply(BASE, [ClusterStateChanged("c2", s) for s in ("read_only", "draining", "decommissioned")])
    leases = LeaseTable(lease_ms=1000)
    leases.start_term(0.0)
    leases.beat("c1", True, None, 0, 0.5, 0)
    assert leases.decide(image, 1.2, 0) == []


def test_group_generations_follow_members_and_partitions() -> None:
    groups = GroupCoordinator()
    groups.start_term(0.0)
    groups.heartbeat("g", "m2", ["A"], [], 5000, 0.1)
    records = groups.decide(BASE, node_id=1, now_s=0.2)
    gen1 = apply(BASE, records)
    assert gen1.groups["g"].coordinator_id == 1 and gen1.groups["g"].generation == 1
    assert gen1.groups["g"].members[0].assignment == (("A", 0), ("A", 1), ("A", 2))
    # a second member joins inside the new leader's grace: no need to wait, every member was heard
    groups.heartbeat("g", "m1", ["A"], [], 5000, 0.3)
    (gen2,) = groups.decide(gen1, node_id=1, now_s=0.4)
    assert isinstance(gen2, GroupGenerationStarted) and gen2.generation == 2
    assert [(m.member_id, m.assignment) for m in gen2.members] == [("m1", (("A", 0), ("A", 2))), ("m2", (("A", 1),))]
    image = apply(gen1, [gen2])
    # m2 still consumes A/0: m1 may not start it yet
    groups.heartbeat("g", "m2", ["A"], [("A", 0), ("A", 1)], 5000, 0.5)
    assert groups.reply("g", "m1", image)["startable"] == [["A", 2]]
    groups.heartbeat("g", "m2", ["A"], [("A", 1)], 5000, 0.6)
    assert groups.reply("g", "m1", image)["startable"] == [["A", 0], ["A", 2]]
    # removed partitions leave the assignment; a silent member expires
    image = apply(image, [PartitionStateChanged("A", 2, "read_only"), PartitionStateChanged("A", 2, "removed")])
    (gen3,) = groups.decide(image, node_id=1, now_s=0.7)
    assert [m.assignment for m in gen3.members] == [(("A", 0),), (("A", 1),)]
    image = apply(image, [gen3])
    groups.heartbeat("g", "m1", ["A"], [("A", 0)], 5000, 5.0)
    (gen4,) = groups.decide(image, node_id=1, now_s=6.0)  # m2 last heard at 0.6 s
    assert [(m.member_id, m.assignment) for m in gen4.members] == [("m1", (("A", 0), ("A", 1)))]


def test_a_partition_a_member_was_told_it_may_start_is_not_given_to_another_before_it_reports() -> None:
    """m2 alone is told it may start A/0-A/2; m1 joins and gets A/0 and A/2 before m2 heartbeats again (m2's
    last report, from before it started them, says it consumes nothing): m1 must wait for m2's report."""
    groups = GroupCoordinator()
    groups.start_term(0.0)
    groups.heartbeat("g", "m2", ["A"], [], 5000, 0.1)
    gen1 = apply(BASE, groups.decide(BASE, node_id=1, now_s=0.2))
    assert groups.reply("g", "m2", gen1)["startable"] == [["A", 0], ["A", 1], ["A", 2]]
    groups.heartbeat("g", "m1", ["A"], [], 5000, 0.3)
    image = apply(gen1, groups.decide(gen1, node_id=1, now_s=0.4))
    assert groups.reply("g", "m1", image)["startable"] == [], "m2 may be consuming all three"
    groups.heartbeat("g", "m2", ["A"], [("A", 0), ("A", 1), ("A", 2)], 5000, 0.5)  # it started them
    assert groups.reply("g", "m2", image)["startable"] == [["A", 1]], "m2 learns A/0 and A/2 left it"
    assert groups.reply("g", "m1", image)["startable"] == [], "m2 has not revoked them yet"
    groups.heartbeat("g", "m2", ["A"], [("A", 1)], 5000, 0.6)  # revoked, committed, reported
    assert groups.reply("g", "m1", image)["startable"] == [["A", 0], ["A", 2]]
    assert groups.reply("g", "m2", image)["startable"] == [["A", 1]], "its own grant does not hold it back"


def test_a_new_leader_waits_for_known_members_before_rebalancing() -> None:
    image = apply(BASE, [GroupCoordinatorAssigned("g", 1),
                         GroupGenerationStarted("g", 3, (GroupMember("m1", (("A", 0), ("A", 1), ("A", 2))),
                                                         GroupMember("m2", ())))])  # fmt: skip
    groups = GroupCoordinator()
    groups.start_term(100.0)
    groups.heartbeat("g", "m1", ["A"], [("A", 0)], 5000, 100.1)
    # m2 has not re-reported yet: only the coordinator changes, no new generation
    assert groups.decide(image, node_id=2, now_s=100.2) == [GroupCoordinatorAssigned("g", 2)]
    groups.heartbeat("g", "m2", ["A"], [], 5000, 100.3)
    records = groups.decide(image, node_id=2, now_s=100.4)
    assert [type(r).__name__ for r in records] == ["GroupCoordinatorAssigned", "GroupGenerationStarted"]


def test_a_cluster_registered_before_its_agent_runs_gets_one_lease_to_show_up() -> None:
    leases = LeaseTable(lease_ms=3000)
    leases.start_term(now_s=0.0)
    leases.beat("c1", True, None, 0, 50.0, 0)
    leases.decide(BASE, 50.0, 0)  # the leader checks every 100 ms; c9 does not exist yet
    later = apply(BASE, [ClusterRegistered("c9", "r1", "h:9")])
    assert leases.decide(later, 50.1, 1) == [ClusterFenced("c2", LEASE_EXPIRED, 1)]  # c9 first seen now
    assert leases.decide(later, 52.9, 2) == [ClusterFenced("c2", LEASE_EXPIRED, 2)]  # c9: 2.8 s of its 3
    assert ClusterFenced("c9", LEASE_EXPIRED, 3) in leases.decide(later, 53.2, 3)
