"""Leases (soft state on the leader) turn into fencing records only on change; reconciliation plans."""

from __future__ import annotations

from broker_agent import reconcile
from controller.leases import LEASE_EXPIRED, LeaseTable
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    PartitionsAdded,
    PartitionStateChanged,
    TopicCreated,
)

BASE = apply(
    EMPTY_IMAGE,
    [
        ClusterRegistered("c1", "r1", "h:1"),
        ClusterRegistered("c2", "r1", "h:2"),
        TopicCreated("i", "A", "r1"),
        PartitionsAdded("A", 0, "c1", "A", 0),
        PartitionsAdded("A", 1, "c1", "A", 1),
        PartitionsAdded("A", 2, "c2", "A", 0),
        TopicCreated("j", "B", "r1"),
        PartitionsAdded("B", 0, "c1", "phys-b", 4),
    ],
)


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


def test_decommissioned_clusters_are_not_fenced() -> None:
    image = apply(BASE, [ClusterStateChanged("c2", s) for s in ("read_only", "draining", "decommissioned")])
    leases = LeaseTable(lease_ms=1000)
    leases.start_term(0.0)
    leases.beat("c1", True, None, 0, 0.5, 0)
    assert leases.decide(image, 1.2, 0) == []


def test_plan_creates_missing_topics_with_final_counts_and_leaves_foreign_topics_alone() -> None:
    plan = reconcile.plan(BASE, "c1", {"someone-elses": 3})
    assert dict(plan.create) == {"A": 2, "phys-b": 5}
    assert plan.delete == () and not plan.recreate
    assert reconcile.plan(BASE, "c1", {"A": 2, "phys-b": 5}).empty


def test_plan_deletes_fully_removed_and_deleted_topics_only() -> None:
    image: MetadataImage = apply(
        BASE, [PartitionStateChanged("A", 2, "read_only"), PartitionStateChanged("A", 2, "removed")]
    )
    assert reconcile.plan(image, "c2", {"A": 1}).delete == ("A",)
    image = apply(image, [PartitionStateChanged("A", 0, "read_only"), PartitionStateChanged("A", 0, "removed")])
    assert reconcile.plan(image, "c1", {"A": 2, "phys-b": 5}).delete == ()  # A/1 still lives on c1
    assert reconcile.plan(BASE, "c1", {"A": 2, "phys-b": 5, "old": 1}, also_delete=["old"]).delete == ("old",)
    assert reconcile.plan(BASE, "c1", {"A": 2, "phys-b": 5}, also_delete=["A"]).delete == ()  # still placed here


def test_plan_for_a_decommissioned_cluster_deletes_everything_it_managed() -> None:
    image = apply(BASE, [ClusterStateChanged("c2", s) for s in ("read_only", "draining", "decommissioned")])
    assert reconcile.plan(image, "c2", {"A": 1, "foreign": 1}).delete == ("A",)


def test_recovering_cluster_recreates_auto_created_topics_with_too_few_partitions() -> None:
    assert dict(reconcile.plan(BASE, "c1", {"A": 1, "phys-b": 5}, recovering=True).recreate) == {"A": 2}
    assert not reconcile.plan(BASE, "c1", {"A": 1, "phys-b": 5}, recovering=False).recreate
