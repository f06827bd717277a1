"""Record types of the metadata log (v0 of the contract in docs/DESIGN.md).

Every record is a frozen dataclass with a ``TYPE`` tag. The wire form (see ``codec.py``) is positional,
so a field is only ever *appended*, with a default; a type is never renamed, renumbered or retyped.
Each class says in its comment what changed in each version.

Granularity: until metadata version 4, one record per logical partition (``PartitionsAdded`` carries one
partition; the plural name is the v0 contract) and per physical partition's leader. From version 4 a record
is sized by the change, not by the partition count: a range of partitions (``PartitionRangeAdded``,
``PartitionRangeStateChanged``) or a bounded list of leaders (``PhysicalLeadersReported``). Old records
still replay.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Literal

from .errors import KfedError

ClusterState = Literal["active", "read_only", "draining", "decommissioned"]
PartitionState = Literal["writable", "read_only", "removed"]

CLUSTER_STATES: Final[tuple[ClusterState, ...]] = ("active", "read_only", "draining", "decommissioned")
PARTITION_STATES: Final[tuple[PartitionState, ...]] = ("writable", "read_only", "removed")
LATEST_METADATA_VERSION: Final = 4
"""The newest ``MetadataVersionChanged.version`` this software reads and writes."""


class NewerMetadataVersion(KfedError, ValueError):
    """Metadata (a command, a record, a snapshot) of a version newer than this software reads.

    Unlike a record that does not fit its image (``InvalidRecord``, the same on every node), this depends on
    the reader's code: a voter that skipped such a committed command would go on with a state no other voter
    has, so a controller stops instead (``LogState``); a tailer reports it."""

    def __init__(self, version: int) -> None:
        super().__init__(
            f"metadata version {version} is newer than this kfed reads (up to {LATEST_METADATA_VERSION}): upgrade it"
        )
        self.version = version


@dataclass(frozen=True, slots=True)
class ClusterRegistered:  # v0: initial. Re-registering an existing id updates its bootstrap servers.
    TYPE: ClassVar[str] = "ClusterRegistered"
    cluster_id: str
    region: str
    bootstrap_servers: str


@dataclass(frozen=True, slots=True)
class ClusterStateChanged:  # v0: initial
    TYPE: ClassVar[str] = "ClusterStateChanged"
    cluster_id: str
    state: ClusterState


@dataclass(frozen=True, slots=True)
class ClusterFenced:  # v0: initial. `at_ms` is the proposer's wall clock (apply never reads a clock).
    TYPE: ClassVar[str] = "ClusterFenced"
    cluster_id: str
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class ClusterUnfenced:  # v0: initial
    TYPE: ClassVar[str] = "ClusterUnfenced"
    cluster_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class PhysicalPartitionsReported:  # v0: initial. One physical partition whose leader or presence changed.
    TYPE: ClassVar[str] = "PhysicalPartitionsReported"
    cluster_id: str
    physical_topic: str
    physical_partition: int
    leader: str | None  # "host:port", or None when the partition has no leader / is missing


@dataclass(frozen=True, slots=True)
class TopicCreated:  # v0: initial. Its partitions follow as PartitionsAdded records in the same batch.
    TYPE: ClassVar[str] = "TopicCreated"
    topic_id: str
    name: str
    region: str
    retention_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionsAdded:  # v0: initial. One logical partition; ids are dense per topic and never reused.
    TYPE: ClassVar[str] = "PartitionsAdded"
    topic: str
    partition: int
    cluster_id: str
    physical_topic: str
    physical_partition: int


@dataclass(frozen=True, slots=True)
class PartitionStateChanged:  # v0: initial
    TYPE: ClassVar[str] = "PartitionStateChanged"
    topic: str
    partition: int
    state: PartitionState


@dataclass(frozen=True, slots=True)
class TopicDeleted:  # v0: initial
    TYPE: ClassVar[str] = "TopicDeleted"
    name: str


# -- ranges (metadata version 4): records sized by the change, not by the partition count ----------------------
@dataclass(frozen=True, slots=True)
class PartitionRangeAdded:  # v0: initial. Partitions first.. (count of them) on physical first_physical.. of a cluster.
    """What ``count`` consecutive ``PartitionsAdded`` say when logical and physical ids both go up by one: a topic
    created over four clusters is four of these, whatever its size."""

    TYPE: ClassVar[str] = "PartitionRangeAdded"
    topic: str
    first_partition: int
    count: int
    cluster_id: str
    physical_topic: str
    first_physical_partition: int


@dataclass(frozen=True, slots=True)
class PartitionRangeStateChanged:  # v0: initial. Logical partitions first..first+count-1 of a topic go to `state`.
    TYPE: ClassVar[str] = "PartitionRangeStateChanged"
    topic: str
    first_partition: int
    count: int
    state: PartitionState


@dataclass(frozen=True, slots=True)
class PhysicalLeadersReported:  # v0: initial. Leaders of partition ranges of one physical topic of one cluster.
    """What many ``PhysicalPartitionsReported`` of one physical topic of one cluster say, in compact form:
    ``ranges`` are (first partition, count) pairs, and ``leaders`` the leader of each partition they cover, in
    order, as an index into ``brokers`` (-1: none or missing). A snapshot writes a topic's leaders as one range
    of small integers; a broker failure that moves 100,000 leaders is a few dozen of these."""

    TYPE: ClassVar[str] = "PhysicalLeadersReported"
    cluster_id: str
    physical_topic: str
    brokers: tuple[str, ...]
    ranges: tuple[int, ...]
    leaders: tuple[int, ...]


MAX_LEADERS_PER_RECORD: Final = 4096
"""Most partitions one ``PhysicalLeadersReported`` that kfed writes names (a record stays a few kilobytes)."""

RANGE_RECORD_TYPES: Final = (PartitionRangeAdded, PartitionRangeStateChanged, PhysicalLeadersReported)
RANGES_VERSION: Final = 4
"""The metadata version from which commands and snapshots write ``RANGE_RECORD_TYPES`` instead of a record per
partition (which every version reads)."""


@dataclass(frozen=True, slots=True)
class GroupCoordinatorAssigned:  # v0: initial
    TYPE: ClassVar[str] = "GroupCoordinatorAssigned"
    group: str
    coordinator_id: int


@dataclass(frozen=True, slots=True)
class GroupMember:
    """One member of a generation and the logical partitions it owns (not a record: a field value)."""

    member_id: str
    assignment: tuple[tuple[str, int], ...]  # (topic, logical partition)


@dataclass(frozen=True, slots=True)
class GroupGenerationStarted:  # v0: initial
    TYPE: ClassVar[str] = "GroupGenerationStarted"
    group: str
    generation: int
    members: tuple[GroupMember, ...]


@dataclass(frozen=True, slots=True)
class NoOp:  # v0: initial. Written to move the log forward (e.g. a leader proving it can commit).
    TYPE: ClassVar[str] = "NoOp"


@dataclass(frozen=True, slots=True)
class QuorumVoterChanged:  # v0: initial. A controller joined (voter=True) or left (False) the quorum.
    TYPE: ClassVar[str] = "QuorumVoterChanged"
    voter_id: int
    raft: str  # "host:port"
    http: str  # base URL
    voter: bool


@dataclass(frozen=True, slots=True)
class MetadataVersionChanged:  # v0: initial. The quorum's nodes all read this version of the Raft commands.
    """Version 1: a command's records are rows; 2: runs of one record type may be columns (``state.py``);
    3: the gateway's, key order's and transactions' records; 4: range records (``RANGE_RECORD_TYPES``), which
    commands and snapshots write instead of one record per partition (``FIRST_VERSION``). The leader raises it once
    every voter says it reads the new version; it never goes down."""

    TYPE: ClassVar[str] = "MetadataVersionChanged"
    version: int


# -- gateway instances (kfed gateway) ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class GatewayRegistered:  # v0: initial. A gateway process serving the Kafka protocol as broker gateway_id.
    """``instance`` is new in every process, so a restart is a new registration; ``incarnation`` numbers the
    registrations of every gateway, each above all before it (a process mints ids unique to it from it)."""

    TYPE: ClassVar[str] = "GatewayRegistered"
    gateway_id: int
    host: str
    port: int
    instance: str
    incarnation: int
    rack: str | None = None
    listener: str = "PLAINTEXT"  # the security of its Kafka listener: clients are told of gateways like it


@dataclass(frozen=True, slots=True)
class GatewayExpired:  # v0: initial. Its lease ran out, or another registration took its address: not live.
    TYPE: ClassVar[str] = "GatewayExpired"
    gateway_id: int
    at_ms: int


# -- key order (docs/KEY_ORDER.md) ------------------------------------------------------------------------------
# Replayed by ``metadata_log/keyorder/replay.py`` (the image's ``key_orders``); in ``Record`` and ``RECORD_TYPES``.

KeyOrder = Literal["none", "strict"]
KEY_ORDERS: Final[tuple[KeyOrder, ...]] = ("none", "strict")


@dataclass(frozen=True, slots=True)
class TopicKeyOrderChanged:  # v0: initial. "strict" is followed in the same batch by its first epoch's records.
    TYPE: ClassVar[str] = "TopicKeyOrderChanged"
    topic: str
    key_order: KeyOrder


@dataclass(frozen=True, slots=True)
class KeyOrderEpochStarted:  # v0: initial. Its `moves` KeyRangeMoved records follow in the same batch.
    TYPE: ClassVar[str] = "KeyOrderEpochStarted"
    topic: str
    epoch: int
    moves: int
    cause: str


@dataclass(frozen=True, slots=True)
class KeyRangeMoved:  # v0: initial. Slots [first_slot, end_slot) go from from_partition (-1: none) to to_partition.
    TYPE: ClassVar[str] = "KeyRangeMoved"
    topic: str
    epoch: int
    first_slot: int
    end_slot: int
    from_partition: int
    to_partition: int


@dataclass(frozen=True, slots=True)
class KeyOrderSealed:  # v0: initial. No record of an epoch before `epoch` is written to `partition` from end_offset on.
    TYPE: ClassVar[str] = "KeyOrderSealed"
    topic: str
    epoch: int
    partition: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class KeyRangeReleased:  # v0: initial. `group` may deliver what left `partition` in `epoch`; broken: it gave up.
    TYPE: ClassVar[str] = "KeyRangeReleased"
    group: str
    topic: str
    epoch: int
    partition: int
    broken: bool
    reason: str
    at_offset: int = -1  # the log offset of the release; -1: this record's own (a snapshot writes the original)


KeyOrderRecord = TopicKeyOrderChanged | KeyOrderEpochStarted | KeyRangeMoved | KeyOrderSealed | KeyRangeReleased

KEY_ORDER_RECORD_TYPES: Final[tuple[type[KeyOrderRecord], ...]] = (
    TopicKeyOrderChanged,
    KeyOrderEpochStarted,
    KeyRangeMoved,
    KeyOrderSealed,
    KeyRangeReleased,
)


# ---- Transactions across sub-clusters (docs/TRANSACTIONS.md; replayed by metadata_log/txn.py) ----------------
# Members of ``Record`` / ``RECORD_TYPES`` (through ``TxnRecord``), applied by ``image/transactions.py``.
# Flat fields only (one record per partition, as PartitionsAdded), so the codec needs no case of its own.


@dataclass(frozen=True, slots=True)
class TxnProducerInitialized:  # v0: initial. A transactional.id's new (producer_id, epoch); every older one is fenced.
    """Written by a producer's init_transactions, and by the coordinator when it takes a transaction over (a
    timeout, or a decided transaction its owner leaves incomplete): the epoch moves on so the old owner can
    start nothing more. ``at_ms`` is the proposer's wall clock."""

    TYPE: ClassVar[str] = "TxnProducerInitialized"
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class TxnPartitionAdded:  # v0: initial. One physical partition joins transaction `sequence`; the first starts it.
    """Logged before the producer writes to the partition (Kafka's AddPartitionsToTxn), so the coordinator
    knows every cluster it may have to end the transaction on."""

    TYPE: ClassVar[str] = "TxnPartitionAdded"
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    cluster_id: str
    physical_topic: str
    physical_partition: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class TxnGroupAdded:  # v0: initial. A consumer group's offsets on one cluster join transaction `sequence`.
    """``send_offsets_to_transaction``: the group's offsets for partitions on ``cluster_id`` are committed in
    that cluster's part of the transaction (Kafka's AddOffsetsToTxn), so they become visible with its output."""

    TYPE: ClassVar[str] = "TxnGroupAdded"
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    cluster_id: str
    group: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class TxnDecided:  # v0: initial. The decision of transaction `sequence`: final; what follows only completes it.
    TYPE: ClassVar[str] = "TxnDecided"
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    commit: bool
    reason: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class TxnParticipantCompleted:  # v0: initial. One participant cluster ended its part as decided.
    TYPE: ClassVar[str] = "TxnParticipantCompleted"
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    cluster_id: str


@dataclass(frozen=True, slots=True)
class TxnProducerRestored:  # v0: initial. Snapshots only: a transactional.id's (producer_id, epoch) as it is.
    """A snapshot cannot replay a producer's history of epochs, so it states the result; the transaction it
    holds is restored by ``TxnRestored`` and the ordinary records after it (``txn.snapshot_records``)."""

    TYPE: ClassVar[str] = "TxnProducerRestored"
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    at_ms: int


@dataclass(frozen=True, slots=True)
class TxnRestored:  # v0: initial. Snapshots only: transaction `sequence` starts as it started, with no partition yet.
    TYPE: ClassVar[str] = "TxnRestored"
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    started_at_ms: int


TxnRecord = (
    TxnProducerInitialized
    | TxnPartitionAdded
    | TxnGroupAdded
    | TxnDecided
    | TxnParticipantCompleted
    | TxnProducerRestored
    | TxnRestored
)
TXN_RECORD_TYPES: Final[tuple[type[TxnRecord], ...]] = (
    TxnProducerInitialized,
    TxnPartitionAdded,
    TxnGroupAdded,
    TxnDecided,
    TxnParticipantCompleted,
    TxnProducerRestored,
    TxnRestored,
)


FIRST_VERSION: Final[dict[type, int]] = {
    **{cls: 3 for cls in (GatewayRegistered, GatewayExpired, *KEY_ORDER_RECORD_TYPES, *TXN_RECORD_TYPES)},
    **{cls: RANGES_VERSION for cls in RANGE_RECORD_TYPES},
}
"""The metadata version that introduced each record type newer than version 1. A quorum writes one only once
its version is at least that: a controller of an older kfed reads the version of every command, and stops
with "upgrade it" (``NewerMetadataVersion``) instead of meeting a record type it does not know."""


def version_needed(records: Iterable[object]) -> int:
    """The lowest metadata version in which every one of ``records`` may be written."""
    return max((FIRST_VERSION.get(type(r), 1) for r in records), default=1)


def version_to_read(record: object) -> int:
    """The lowest metadata version a reader must know to replay ``record``: its type's, or the version a
    ``MetadataVersionChanged`` moves to (``GET /v1/log?metadata_version=``)."""
    if isinstance(record, MetadataVersionChanged):
        return max(record.version, 1)
    return FIRST_VERSION.get(type(record), 1)


Record = (
    ClusterRegistered
    | ClusterStateChanged
    | ClusterFenced
    | ClusterUnfenced
    | PhysicalPartitionsReported
    | TopicCreated
    | PartitionsAdded
    | PartitionStateChanged
    | TopicDeleted
    | PartitionRangeAdded
    | PartitionRangeStateChanged
    | PhysicalLeadersReported
    | GroupCoordinatorAssigned
    | GroupGenerationStarted
    | NoOp
    | QuorumVoterChanged
    | MetadataVersionChanged
    | GatewayRegistered
    | GatewayExpired
    | KeyOrderRecord
    | TxnRecord
)

RECORD_TYPES: Final[tuple[type[Record], ...]] = (
    ClusterRegistered,
    ClusterStateChanged,
    ClusterFenced,
    ClusterUnfenced,
    PhysicalPartitionsReported,
    TopicCreated,
    PartitionsAdded,
    PartitionStateChanged,
    TopicDeleted,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PhysicalLeadersReported,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    NoOp,
    QuorumVoterChanged,
    MetadataVersionChanged,
    GatewayRegistered,
    GatewayExpired,
    *KEY_ORDER_RECORD_TYPES,
    *TXN_RECORD_TYPES,
)


def _quick_init(cls: type) -> None:
    """Replace the ``__init__`` of a frozen slots dataclass by one that stores each field through its slot
    descriptor. The generated one calls ``object.__setattr__`` per field (frozen classes forbid plain
    assignment): 1.1 µs for a ``PartitionsAdded`` against 0.5 µs, and records are built by the million (a
    follower decodes every one; a 500-partition topic is 501). Same signature, defaults and result:
    the class stays frozen, since only ``__init__`` writes through the descriptors."""
    fields = dataclasses.fields(cls)
    namespace: dict[str, Any] = {}
    params, body = [], []
    for f in fields:
        if f.default_factory is not dataclasses.MISSING:
            raise TypeError(f"{cls.__name__}.{f.name}: default factories are not supported here")
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            namespace[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        namespace[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        body.append(f"    _set_{f.name}(self, {f.name})")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(body) or "    pass") + "\n"
    exec(source, namespace)  # built from the dataclass's own field names, as dataclasses does
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[misc]


for _cls in (*RECORD_TYPES, GroupMember):
    _quick_init(_cls)
