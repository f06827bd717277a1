"""``MetadataDelta`` and the one pure function that makes the next image (Kafka's ``MetadataDelta``).

``apply(image, records)`` replays records into a ``MetadataDelta`` and freezes it once per batch. The delta
is a dispatcher: each record type goes to the part of the image it changes (``ClusterDelta``,
``TopicsDelta``, ``GroupsDelta``, ``QuorumDelta``, ``GatewaysDelta``), created on first use as a copy-on-write
view of the image's map. A part replays a record at a time, or a whole run of records of one type given as columns
(``_RUN_ROUTES``: a topic's partitions, an agent's leader reports, a group commit of registrations), with the
same checks and the same first error.

Replay checks every record against the image and raises ``InvalidRecord`` when it does not fit (an unknown
cluster, a partition id that is not the next one, a state change off its allowed path): the Raft state
machine turns that into a rejected proposal, so a race between two writers validated against the same image
can never corrupt the log. No clock, no randomness, no I/O here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import groupby
from typing import Any, Final, cast

from ..codec import Run, build_records, record_columns
from ..records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    GatewayExpired,
    GatewayRegistered,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    KeyOrderEpochStarted,
    KeyOrderRecord,
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
from .changes import Touched
from .cluster import ClusterDelta, LastRegistrations
from .common import InvalidRecord
from .gateways import GatewaysDelta
from .groups import GroupsDelta
from .key_orders import KeyOrdersDelta
from .metadata import MetadataImage
from .quorum import QuorumDelta
from .topics import TopicsDelta
from .transactions import TransactionsDelta


class MetadataDelta:
    """Changes of one batch over a base image: ``replay`` records (or ``replay_run`` columns), then ``apply``
    once. Counts the records replayed: the image after them is at ``base.offset`` + that many."""

    __slots__ = (
        "_base",
        "_clusters",
        "_count",
        "_gateways",
        "_groups",
        "_key_orders",
        "_memo",
        "_quorum",
        "_topics",
        "_txns",
    )

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._clusters: ClusterDelta | None = None
        self._topics: TopicsDelta | None = None
        self._groups: GroupsDelta | None = None
        self._quorum: QuorumDelta | None = None
        self._gateways: GatewaysDelta | None = None
        self._txns: TransactionsDelta | None = None
        self._key_orders: KeyOrdersDelta | None = None
        self._memo = base.replay_memo
        self._count = 0

    @property
    def base(self) -> MetadataImage:
        """The image this delta applies to."""
        return self._base

    # -- the parts, each made on first use -----------------------------------------------------------
    def cluster_delta(self) -> ClusterDelta:
        part = self._clusters
        if part is None:
            if self._memo is None:
                self._memo = LastRegistrations()
            part = self._clusters = ClusterDelta(self._base.clusters, self._memo)
        return part

    def topics_delta(self) -> TopicsDelta:
        part = self._topics
        if part is None:
            # The clusters as replayed so far, through the cluster delta itself: a method of this delta would
            # make a reference cycle, and the garbage collector, not reference counting, would free each batch.
            part = self._topics = TopicsDelta(self._base.topics, self.cluster_delta().current)
        return part

    def groups_delta(self) -> GroupsDelta:
        part = self._groups
        if part is None:
            part = self._groups = GroupsDelta(self._base.groups)
        return part

    def quorum_delta(self) -> QuorumDelta:
        part = self._quorum
        if part is None:
            part = self._quorum = QuorumDelta(self._base.voters, self._base.metadata_version)
        return part

    def gateways_delta(self) -> GatewaysDelta:
        part = self._gateways
        if part is None:
            part = self._gateways = GatewaysDelta(self._base.gateways)
        return part

    def transactions_delta(self) -> TransactionsDelta:
        part = self._txns
        if part is None:
            part = self._txns = TransactionsDelta(self._base.transactions)
        return part

    def key_orders_delta(self) -> KeyOrdersDelta:
        part = self._key_orders
        if part is None:
            # a bound method of the topics part, not of this delta: no reference cycle (see topics_delta)
            part = self._key_orders = KeyOrdersDelta(self._base.key_orders, self.topics_delta().partition_count)
        return part

    def key_order_record(self, record: KeyOrderRecord) -> None:
        """A key-order record, with the log offset it takes."""
        self.key_orders_delta().replay(record, self._base.offset + self._count + 1)

    def topic_deleted(self, record: TopicDeleted) -> None:
        """A topic goes, with its key order."""
        self.topics_delta().replay_deleted(record)
        if self._key_orders is not None or record.name in self._base.key_orders:
            self.key_orders_delta().forget(record.name)

    # -- replay --------------------------------------------------------------------------------------
    def replay(self, record: Record) -> None:
        """Fold one record into the delta; ``InvalidRecord`` if it does not fit."""
        route = _ROUTES.get(type(record))
        if route is None:
            raise InvalidRecord(f"not a record: {type(record).__name__}")
        part, replay = route
        replay(part(self), record)
        self._count += 1

    def replay_run(self, cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> None:
        """Fold ``n`` consecutive records of type ``cls``, given as checked columns (one per field, in order):
        a whole run at a time where the part has a columnar path (``BULK_TYPES``), else record by record."""
        route = _RUN_ROUTES.get(cls)
        if route is None:
            for record in build_records(cls, columns, n):
                self.replay(record)
            return
        part, replay = route
        replay(part(self), *columns)
        self._count += n

    def replay_records(self, records: Iterable[Record]) -> None:
        """``replay`` of each record; runs of consecutive records of a ``BULK_TYPES`` type go as columns."""
        for cls, group in groupby(records, type):
            if cls in BULK_TYPES:
                run = list(group)
                self.replay_run(cls, record_columns(run, cls), len(run))
            else:
                for record in group:
                    self.replay(record)

    def replay_items(self, items: Iterable[Run | Record]) -> None:
        """Records of which some come as a ``Run`` (records of one type as checked columns), as the codec
        decodes a command or a snapshot: each run goes to ``replay_run`` as it is, the records between runs
        to ``replay_records``."""
        for is_run, group in groupby(items, _is_run):
            if is_run:
                for run in cast(Iterator[Run], group):
                    self.replay_run(*run)
            else:
                self.replay_records(cast(Iterator[Record], group))

    def apply(self) -> MetadataImage:
        """The image after every replayed record; unchanged parts are the base image's own maps."""
        base = self._base
        clusters, topics, groups, quorum = self._clusters, self._topics, self._groups, self._quorum
        gateways, key_orders = self._gateways, self._key_orders
        return MetadataImage(  # by position: the fields in order (offset, clusters, topics, groups, voters, ...)
            base.offset + self._count,
            clusters.apply() if clusters is not None else base.clusters,
            topics.apply() if topics is not None else base.topics,
            groups.apply() if groups is not None else base.groups,
            quorum.voters() if quorum is not None else base.voters,
            quorum.metadata_version if quorum is not None else base.metadata_version,
            gateways.apply() if gateways is not None else base.gateways,
            key_orders.apply() if key_orders is not None else base.key_orders,
            self._memo,
            transactions=self._txns.apply() if self._txns is not None else base.transactions,
        )

    def touched(self) -> Touched:
        """The topics and clusters the replayed records touched, from which ``Touched.settle`` tells exactly what
        changed between ``base`` and the image ``apply`` makes (Kafka's created, deleted and changed topics)."""
        topics, clusters = self._topics, self._clusters
        whole, partitions = topics.touched() if topics is not None else ((), {})
        changed, leaders = clusters.touched() if clusters is not None else ((), ())
        # not copied: read once the delta is applied, when nothing replays into it any more (apply_touched)
        return Touched(whole, partitions, changed, leaders)


def _is_run(item: Run | Record) -> bool:
    return type(item) is Run


def _no_part(delta: MetadataDelta) -> None:
    return None


def _the_delta(delta: MetadataDelta) -> MetadataDelta:
    return delta


def _nothing(part: None, record: Record) -> None:
    """``NoOp`` changes nothing but the offset."""


_Route = tuple[Callable[[MetadataDelta], Any], Callable[[Any, Any], None]]

_ROUTES: Final[Mapping[type[Record], _Route]] = {
    ClusterRegistered: (MetadataDelta.cluster_delta, ClusterDelta.replay_registered),
    ClusterStateChanged: (MetadataDelta.cluster_delta, ClusterDelta.replay_state_changed),
    ClusterFenced: (MetadataDelta.cluster_delta, ClusterDelta.replay_fenced),
    ClusterUnfenced: (MetadataDelta.cluster_delta, ClusterDelta.replay_unfenced),
    PhysicalPartitionsReported: (MetadataDelta.cluster_delta, ClusterDelta.replay_leader_reported),
    TopicCreated: (MetadataDelta.topics_delta, TopicsDelta.replay_created),
    PartitionsAdded: (MetadataDelta.topics_delta, TopicsDelta.replay_partition_added),
    PartitionStateChanged: (MetadataDelta.topics_delta, TopicsDelta.replay_partition_state),
    TopicDeleted: (_the_delta, MetadataDelta.topic_deleted),
    PartitionRangeAdded: (MetadataDelta.topics_delta, TopicsDelta.replay_range_added),
    PartitionRangeStateChanged: (MetadataDelta.topics_delta, TopicsDelta.replay_range_state),
    PhysicalLeadersReported: (MetadataDelta.cluster_delta, ClusterDelta.replay_leaders_reported),
    GroupCoordinatorAssigned: (MetadataDelta.groups_delta, GroupsDelta.replay_coordinator),
    GroupGenerationStarted: (MetadataDelta.groups_delta, GroupsDelta.replay_generation),
    QuorumVoterChanged: (MetadataDelta.quorum_delta, QuorumDelta.replay_voter),
    MetadataVersionChanged: (MetadataDelta.quorum_delta, QuorumDelta.replay_metadata_version),
    GatewayRegistered: (MetadataDelta.gateways_delta, GatewaysDelta.replay_registered),
    GatewayExpired: (MetadataDelta.gateways_delta, GatewaysDelta.replay_expired),
    NoOp: (_no_part, _nothing),
    TxnProducerInitialized: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnPartitionAdded: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnGroupAdded: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnDecided: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnParticipantCompleted: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnProducerRestored: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    TxnRestored: (MetadataDelta.transactions_delta, TransactionsDelta.replay),
    # -- key order
    TopicKeyOrderChanged: (_the_delta, MetadataDelta.key_order_record),
    KeyOrderEpochStarted: (_the_delta, MetadataDelta.key_order_record),
    KeyRangeMoved: (_the_delta, MetadataDelta.key_order_record),
    KeyOrderSealed: (_the_delta, MetadataDelta.key_order_record),
    KeyRangeReleased: (_the_delta, MetadataDelta.key_order_record),
}
"""Per record type: the part of the image it changes, and the part's method that replays it."""

_RUN_ROUTES: Final[Mapping[type[Record], tuple[Callable[[MetadataDelta], Any], Callable[..., None]]]] = {
    PartitionsAdded: (MetadataDelta.topics_delta, TopicsDelta.add_partitions),
    PhysicalPartitionsReported: (MetadataDelta.cluster_delta, ClusterDelta.report_leaders),
    ClusterRegistered: (MetadataDelta.cluster_delta, ClusterDelta.register),
}
"""Per record type replayed a run at a time: the part, and its method taking the run's columns."""

BULK_TYPES: Final = frozenset(_RUN_ROUTES)
"""Record types ``MetadataDelta.replay_run`` replays a whole run at a time (others: record by record)."""


def apply(image: MetadataImage, records: Iterable[Record]) -> MetadataImage:
    """The image after ``records``, each taking the next offset; ``InvalidRecord`` if any does not fit.

    Atomic: on error the caller still holds the unchanged ``image``. Runs of consecutive ``PartitionsAdded``
    (a topic creation, a scale-up), ``PhysicalPartitionsReported`` (an agent's report) and
    ``ClusterRegistered`` (a group commit of registrations) are replayed as columns: the same checks and the
    same first error as one at a time.
    """
    delta = MetadataDelta(image)
    delta.replay_records(records)
    return delta.apply()


def apply_runs(image: MetadataImage, items: Iterable[Run | Record]) -> MetadataImage:
    """``apply`` of records of which some come as a ``Run``, as the codec decodes them: a follower applies a
    command, and a node loads a snapshot, without building their record objects."""
    delta = MetadataDelta(image)
    delta.replay_items(items)
    return delta.apply()


def apply_touched(image: MetadataImage, items: Iterable[Run | Record]) -> tuple[MetadataImage, Touched]:
    """``apply_runs``, and what the batch touched: for whoever publishes the batch with its changes."""
    delta = MetadataDelta(image)
    delta.replay_items(items)
    return delta.apply(), delta.touched()
