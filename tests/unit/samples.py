"""Sample records and images shared by the unit tests."""

from __future__ import annotations

from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    GroupMember,
    MetadataVersionChanged,
    NoOp,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    QuorumVoterChanged,
    Record,
    TopicCreated,
    TopicDeleted,
)

ONE_OF_EACH: list[Record] = [
    ClusterRegistered("c1", "r1", "127.0.0.1:19092"),
    ClusterRegistered("c2", "r1", "127.0.0.1:29092"),
    ClusterRegistered("c3", "r2", "127.0.0.1:39092"),
    TopicCreated("id-a", "U_TopicA", "r1", None),
    PartitionsAdded("U_TopicA", 0, "c1", "U_TopicA", 0),
    PartitionsAdded("U_TopicA", 1, "c2", "U_TopicA", 0),
    PartitionsAdded("U_TopicA", 2, "c2", "U_TopicA", 1),
    TopicCreated("id-b", "B", "r2", 86_400_000),
    PartitionsAdded("B", 0, "c3", "phys-b", 7),
    PhysicalPartitionsReported("c1", "U_TopicA", 0, "127.0.0.1:19092"),
    PartitionStateChanged("U_TopicA", 1, "read_only"),
    PartitionStateChanged("U_TopicA", 1, "removed"),
    ClusterFenced("c2", "lease expired", 1_700_000_000_000),
    ClusterUnfenced("c2", 1_700_000_001_000),
    ClusterFenced("c1", "probe failed", 1_700_000_002_000),
    ClusterStateChanged("c3", "read_only"),
    GroupCoordinatorAssigned("g1", 2),
    GroupGenerationStarted("g1", 1, (GroupMember("m1", (("U_TopicA", 0), ("U_TopicA", 2))), GroupMember("m2", ()))),
    NoOp(),
    TopicCreated("id-c", "C", "r1"),
    TopicDeleted("C"),
    QuorumVoterChanged(4, "127.0.0.1:9104", "http://127.0.0.1:8004", True),
    QuorumVoterChanged(1, "127.0.0.1:9101", "http://127.0.0.1:8001", False),
    MetadataVersionChanged(2),
]
"""A log that uses every record type and every kind of change; it applies cleanly from the empty image."""
