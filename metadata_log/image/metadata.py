"""The whole image: every part the log describes, as of one offset (Kafka's ``MetadataImage``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .cluster import ClusterImage, LastRegistrations
from .gateways import GatewayImage
from .groups import GroupImage
from .key_orders import KeyOrders
from .partitions import PartitionImage
from .quorum import VoterImage
from .topics import TopicImage
from .transactions import EMPTY_TRANSACTIONS, Transactions


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything the log says, as of ``offset`` (the last applied record; -1 for the empty log).

    An immutable value: its maps are built anew by ``apply`` and typed ``Mapping`` so nothing mutates them.
    ``replay_memo`` is not part of the value (not compared, not shown): what replay keeps from one image to
    the next of the same line, which ``apply`` hands on (see ``LastRegistrations``)."""

    offset: int
    clusters: Mapping[str, ClusterImage]
    topics: Mapping[str, TopicImage]
    groups: Mapping[str, GroupImage]
    voters: Mapping[int, VoterImage] = field(default_factory=dict)
    metadata_version: int = 1  # see ``MetadataVersionChanged``
    gateways: Mapping[int, GatewayImage] = field(default_factory=dict)  # ``kfed gateway`` instances, by broker id
    key_orders: KeyOrders = field(default_factory=dict)  # per topic ever strict; absent: key_order none
    replay_memo: LastRegistrations | None = field(default=None, compare=False, repr=False)
    # After replay_memo, so that positional construction of the fields before it stays as it is.
    transactions: Transactions = EMPTY_TRANSACTIONS  # producers by transactional.id, their transactions

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())


EMPTY_IMAGE: Final = MetadataImage(offset=-1, clusters={}, topics={}, groups={})


def is_writable(image: MetadataImage, partition: PartitionImage) -> bool:
    """Effective writability: partition writable and its cluster active and not fenced."""
    cluster = image.clusters.get(partition.cluster_id)
    return partition.state == "writable" and cluster is not None and cluster.state == "active" and not cluster.fenced
