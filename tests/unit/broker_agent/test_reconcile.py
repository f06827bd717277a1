"""Reconciliation plans (``broker_agent/reconcile.py``): what an agent creates, grows, recreates and deletes on
its physical cluster, from the image alone."""

from __future__ import annotations

from broker_agent import reconcile
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import (
    ClusterRegistered,
    ClusterStateChanged,
    PartitionsAdded,
    PartitionStateChanged,
    TopicCreated,
)

from ..samples import two_clusters

BASE = two_clusters()


def test_plan_creates_missing_topics_with_final_counts_and_leaves_foreign_topics_alone() -> None:
    plan = reconcile.plan(reconcile.placement(BASE, "c1"), {"someone-elses": 3})
    assert dict(plan.create) == {"A": 2, "phys-b": 5}
    assert plan.delete == () and not plan.recreate
    assert reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 2, "phys-b": 5}).empty


def test_plan_deletes_fully_removed_and_deleted_topics_only() -> None:
    image: MetadataImage = apply(
        BASE, [PartitionStateChanged("A", 2, "read_only"), PartitionStateChanged("A", 2, "removed")]
    )
    assert reconcile.plan(reconcile.placement(image, "c2"), {"A": 1}).delete == ("A",)
    image = apply(image, [PartitionStateChanged("A", 0, "read_only"), PartitionStateChanged("A", 0, "removed")])
    assert reconcile.plan(reconcile.placement(image, "c1"), {"A": 2, "phys-b": 5}).delete == ()  # A/1 still lives on c1
    assert reconcile.plan(
        reconcile.placement(BASE, "c1"), {"A": 2, "phys-b": 5, "old": 1}, also_delete=["old"]
    ).delete == ("old",)
    assert (
        reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 2, "phys-b": 5}, also_delete=["A"]).delete == ()
    )  # still placed here


def test_plan_for_a_decommissioned_cluster_deletes_everything_it_managed() -> None:
    image = apply(BASE, [ClusterStateChanged("c2", s) for s in ("read_only", "draining", "decommissioned")])
    assert reconcile.plan(reconcile.placement(image, "c2"), {"A": 1, "foreign": 1}).delete == ("A",)


def test_recovering_cluster_recreates_auto_created_topics_with_too_few_partitions() -> None:
    assert dict(reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 1, "phys-b": 5}, recovering=True).recreate) == {
        "A": 2
    }
    assert not reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 1, "phys-b": 5}, recovering=False).recreate


def test_an_expand_onto_a_cluster_holding_the_physical_topic_grows_it_and_recovery_recreates_it_instead() -> None:
    grown = reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 1, "phys-b": 5})
    assert dict(grown.grow) == {"A": 2} and not grown.recreate and not grown.create and not grown.empty
    recovering = reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 1, "phys-b": 5}, recovering=True)
    assert not recovering.grow and dict(recovering.recreate) == {"A": 2}
    assert not reconcile.plan(reconcile.placement(BASE, "c1"), {"A": 3, "phys-b": 5}).grow, "never shrinks"


def test_placement_lists_the_partitions_draining_on_the_cluster() -> None:
    image = apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "h:1"),
            ClusterRegistered("c2", "r1", "h:2"),
            TopicCreated("i", "t", "r1"),
            PartitionsAdded("t", 0, "c1", "t", 0),
            PartitionsAdded("t", 1, "c1", "t", 1),
            PartitionsAdded("t", 2, "c2", "t", 0),
            PartitionsAdded("t", 3, "c2", "t", 1),
            PartitionStateChanged("t", 1, "read_only"),
            PartitionStateChanged("t", 3, "read_only"),
            PartitionStateChanged("t", 3, "removed"),
        ],
    )
    assert reconcile.placement(image, "c1").draining == (("t", 1),)
    assert reconcile.placement(image, "c2").draining == ()
    image = apply(image, [ClusterStateChanged("c2", "read_only"), ClusterStateChanged("c2", "draining")])
    assert reconcile.placement(image, "c2").draining == (("t", 0),), "removed partitions are done"
