"""Sample records and images shared by the unit tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metadata_log import commands
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply, apply_touched
from metadata_log.image.key_order_history import KeyOrderTopic
from metadata_log.image.key_orders import strict_history
from metadata_log.keymap import slot_of
from metadata_log.publisher import LogDelta
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    GatewayExpired,
    GatewayRegistered,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    GroupMember,
    KeyOrderEpochStarted,
    KeyOrderSealed,
    KeyRangeMoved,
    KeyRangeReleased,
    MetadataVersionChanged,
    NoOp,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
    QuorumVoterChanged,
    Record,
    TopicCreated,
    TopicDeleted,
    TopicKeyOrderChanged,
    TxnDecided,
    TxnGroupAdded,
    TxnParticipantCompleted,
    TxnPartitionAdded,
    TxnProducerInitialized,
    TxnProducerRestored,
    TxnRestored,
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
    # metadata version 4: ranges
    TopicCreated("id-d", "D", "r1"),
    PartitionRangeAdded("D", 0, 3, "c1", "D", 0),
    PartitionRangeAdded("D", 3, 2, "c2", "phys-d", 5),
    PartitionRangeStateChanged("D", 1, 2, "read_only"),
    PhysicalLeadersReported("c1", "D", ("127.0.0.1:19092", "127.0.0.1:19093"), (0, 3), (0, -1, 1)),
    QuorumVoterChanged(4, "127.0.0.1:9104", "http://127.0.0.1:8004", True),
    QuorumVoterChanged(1, "127.0.0.1:9101", "http://127.0.0.1:8001", False),
    MetadataVersionChanged(LATEST_METADATA_VERSION),
    GatewayRegistered(0, "127.0.0.1", 9092, "instance-a", 1),
    GatewayRegistered(1, "127.0.0.1", 9093, "instance-b", 2, "rack-1"),
    GatewayExpired(1, 1_700_000_003_000),
    # key order: U_TopicA strict over P0 and P2, then P2's upper half moves to P0, sealed, released
    TopicKeyOrderChanged("U_TopicA", "strict"),
    KeyOrderEpochStarted("U_TopicA", 1, 2, "switched to strict"),
    KeyRangeMoved("U_TopicA", 1, 0, 8192, -1, 0),
    KeyRangeMoved("U_TopicA", 1, 8192, 16384, -1, 2),
    KeyOrderEpochStarted("U_TopicA", 2, 1, "partition 2 read_only"),
    KeyRangeMoved("U_TopicA", 2, 12288, 16384, 2, 0),
    KeyOrderSealed("U_TopicA", 2, 2, 1234),
    KeyRangeReleased("g1", "U_TopicA", 2, 2, False, ""),
    TxnProducerInitialized("tx-a", 0, 0, 60_000, 1_700_000_004_000),
    TxnPartitionAdded("tx-a", 0, 0, 0, "c1", "U_TopicA", 0, 1_700_000_004_100),
    TxnGroupAdded("tx-a", 0, 0, 0, "c2", "g1", 1_700_000_004_200),
    TxnDecided("tx-a", 0, 0, 0, True, "committed by its producer", 1_700_000_004_300),
    TxnParticipantCompleted("tx-a", 0, 0, 0, "c1"),
    TxnProducerRestored("tx-b", 5, 3, 60_000, 1_700_000_004_400),
    TxnRestored("tx-b", 5, 3, 9, 1_700_000_004_500),
]
"""A log that uses every record type and every kind of change; it applies cleanly from the empty image."""

BATCH_ENDS: list[int] = [
    cut
    for cut in range(len(ONE_OF_EACH) + 1)
    if not (0 < cut < len(ONE_OF_EACH) and type(ONE_OF_EACH[cut]) in (KeyRangeMoved, KeyOrderEpochStarted))
]
"""Where a batch of ``ONE_OF_EACH`` may end (every cut but those inside a key-order epoch, whose records are
one batch: a switch to strict with its first epoch, an epoch with its moves)."""


def two_clusters() -> MetadataImage:
    """Clusters c1 and c2 in region r1; topic A on c1 (physical 0, 1) and c2 (physical 0); topic B on c1 (its
    physical topic ``phys-b``, partition 4): what the lease, group and reconcile tests start from."""
    return apply(
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


def log_delta(base: MetadataImage, records: Sequence[Record]) -> LogDelta:
    """The delta a state machine or a follower publishes for ``records`` committed over ``base``."""
    image, touched = apply_touched(base, records)
    return LogDelta.committed(base, records, image, touched)


def register_gateway(
    image: MetadataImage, gateway_id: int | None, port: int, instance: str
) -> tuple[MetadataImage, dict[str, Any]]:
    """A gateway at 127.0.0.1:``port`` registered as ``commands.register_gateway`` does it: the image after, and
    the reply."""
    result = commands.register_gateway(image, gateway_id, "127.0.0.1", port, instance)
    return apply(image, result.records), result.reply


def shrunk(topic: str = "S", image: MetadataImage | None = None) -> MetadataImage:
    """``topic`` strict over P0-P3, then P3 shrunk: epoch 2 moved P3's slots to P0-P2 (over ``image``, else over
    clusters c1 and c2 in r1)."""
    if image is None:
        image = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1"), ClusterRegistered("c2", "r1", "h:2")])
    image = apply(image, commands.create_topic(image, topic, "r1", 2, f"id-{topic}", key_order="strict").records)
    return apply(image, commands.with_epochs(image, commands.shrink_partitions(image, topic, [3]),
                                              "shrink").records)  # fmt: skip


def strict(image: MetadataImage, topic: str = "S") -> KeyOrderTopic:
    history = strict_history(image.key_orders, topic)
    assert history is not None
    return history


def keys(image: MetadataImage, topic: str = "S") -> tuple[bytes, bytes]:
    """A key that moved from P3 to P0 in epoch 2, and one P0 always had."""
    history = strict(image, topic)
    moved_slots = {
        s for m in history.changes[-1].moves if m.from_partition == 3 for s in range(m.first_slot, m.end_slot)
    }
    moved = next(
        k
        for k in (b"k%d" % i for i in range(100_000))
        if slot_of(k) in moved_slots and history.map.owner(slot_of(k)) == 0
    )
    kept = next(
        k
        for k in (b"k%d" % i for i in range(100_000))
        if slot_of(k) not in moved_slots and history.map.owner(slot_of(k)) == 0
    )
    move = history.changes[-1].move_of(slot_of(moved))
    assert move is not None and move.from_partition == 3 and history.changes[-1].move_of(slot_of(kept)) is None
    return moved, kept
