"""The federation as one Kafka cluster: what every gateway instance tells clients, from one metadata image.

Pure: the same image gives every instance the same answers, so a client may ask any of them.

- **Brokers** are the live gateway instances (``image.gateways``) whose listener has the same security as
  the answering one's (like a Kafka broker's listeners: a TLS client is never sent to a plaintext port), plus
  the answering one when the image does not hold it live yet (a client connected to it knows it is alive).
- **Partition ids**: a logical topic's Kafka partition ids *are* kfed's logical partition ids. kfed hands
  them out densely per topic and never reuses one, so ids 0..n-1 all exist; a removed partition keeps its
  slot forever, leaderless. Clients that assume dense ids (``hash % count``) therefore see a count that
  only grows, as in Kafka, and a position or committed offset always names the same physical partition.
- **Leaders** are spread over the brokers: partition p of a topic is led by broker
  ``(crc32(topic id) + p) % brokers`` in id order. Any instance serves any partition: the spread only
  shares the load, and a dead instance's partitions move to the others when its lease expires.
- **Writability** differs for producers and consumers (Tencent's pproxy/cproxy split, told apart per
  connection, see ``server.py``). Producers see a leader only where kfed takes writes (partition writable,
  cluster active and not fenced, physical partition present): partitioners route key-less records around
  the others (KIP-693's intent). Consumers see a leader on every partition not removed whose cluster is
  not decommissioned, so read-only partitions are read to their end.
- **Strict topics** (``key_order: strict``, ``docs/KEY_ORDER.md``): the gateway places every record itself
  (``StrictRoute``): keyed ones by the current epoch's slot map, key-less ones where the client put them when
  that partition takes writes. So producers see a leader on every partition of a strict topic: wherever a
  client's own hash sends a key, the gateway takes it, and a partition shown leaderless would hold a Java
  client's keyed records in its accumulator until they time out.
- **Topic ids** are kfed's own topic ids (UUIDs) or, for an id that is not one, a UUID derived from it.
"""

from __future__ import annotations

import uuid
import zlib
from array import array
from dataclasses import dataclass, field
from typing import Final, NamedTuple

from kafka_wire.batches import encoded_header
from metadata_log.image import MetadataImage, PartitionImage, TopicImage, is_writable
from metadata_log.image.gateways import live_gateways, next_incarnation
from metadata_log.image.key_order_history import first_moves
from metadata_log.image.key_orders import strict_history
from metadata_log.keymap import EPOCH_HEADER, epoch_header

TOPIC_ID_NAMESPACE: Final = uuid.UUID("5d1c0e0e-6b2f-4f7b-9d56-6b6664e0a126")
"""Names the UUIDs derived from kfed topic ids that are not UUIDs themselves (uuid5 in this namespace)."""
NO_LEADER: Final = -1


class Broker(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None


class PartitionRoute(NamedTuple):
    """Where one logical partition lives, and whether it takes writes and reads now."""

    topic: str
    partition: int
    cluster_id: str
    physical_topic: str
    physical_partition: int
    writable: bool
    readable: bool


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The Kafka topic id of a kfed topic: its own id when that is a UUID (kfed makes uuid4s)."""
    try:
        value = uuid.UUID(topic_id)
    except ValueError:
        return uuid.uuid5(TOPIC_ID_NAMESPACE, topic_id)
    return value if value.int > 1 else uuid.uuid5(TOPIC_ID_NAMESPACE, topic_id)  # 0 and 1 are Kafka's reserved ids


class StrictRoute(NamedTuple):
    """Where a strict topic's records go now, as the placer (``protocol/batches.py``) reads it: per slot
    (``crc32(key) & 16383``) the logical partition of the current epoch's map as native int32, -1 when that
    partition takes no writes now (its keys wait: they never move outside an epoch); per slot 1 where it has
    moved, so that its records carry the epoch, in ``header`` (``kfed-epoch``, encoded as a record carries it)."""

    epoch: int
    table: bytes
    stamped: bytes
    header: bytes
    writable: tuple[int, ...]  # the partitions that take writes, for key-less records


@dataclass(frozen=True)
class TopicView:
    name: str
    topic_id: uuid.UUID
    placements: tuple[PartitionRoute, ...]  # index == partition id
    first_broker: int  # index into the brokers of partition 0's leader
    strict: StrictRoute | None = None


@dataclass
class ClusterView:
    """One image as a Kafka cluster, seen from the gateway ``self_broker``. Built once per image."""

    image: MetadataImage
    self_broker: Broker
    listener: str = "PLAINTEXT"  # the answering gateway's: clients are told only of gateways they can connect to
    brokers: tuple[Broker, ...] = field(init=False)
    next_incarnation: int = field(init=False)
    """The log's next gateway registration: client producer ids of incarnations below it may be minted."""
    _topics: dict[str, TopicView | None] = field(init=False, default_factory=dict)
    _by_uuid: dict[uuid.UUID, str] | None = field(init=False, default=None)
    _by_physical: dict[tuple[str, str, int], tuple[str, int]] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        live = [
            Broker(g.gateway_id, g.host, g.port, g.rack)
            for g in live_gateways(self.image.gateways)
            if g.listener == self.listener
        ]
        if not any(b.node_id == self.self_broker.node_id for b in live):
            live.append(self.self_broker)
            live.sort()
        self.brokers = tuple(live)
        self.next_incarnation = next_incarnation(self.image.gateways)

    @property
    def offset(self) -> int:
        return self.image.offset

    def broker(self, node_id: int) -> Broker | None:
        return next((b for b in self.brokers if b.node_id == node_id), None)

    @property
    def controller_id(self) -> int:
        return self.brokers[0].node_id

    # -- topics ------------------------------------------------------------------------------------
    def topic_names(self) -> list[str]:
        return sorted(self.image.topics)

    def topic(self, name: str) -> TopicView | None:
        if name in self._topics:
            return self._topics[name]
        t = self.image.topics.get(name)
        view = None if t is None else self._topic_view(t)
        self._topics[name] = view
        return view

    def _topic_view(self, t: TopicImage) -> TopicView:
        placements = tuple(self._placement(t.name, p) for p in t.partitions)
        first = zlib.crc32(t.topic_id.encode()) % len(self.brokers)
        return TopicView(t.name, topic_uuid(t.topic_id), placements, first, self._strict_route(t.name, placements))

    def _strict_route(self, name: str, placements: tuple[PartitionRoute, ...]) -> StrictRoute | None:
        history = strict_history(self.image.key_orders, name)
        if history is None:
            return None
        writable = tuple(p.partition for p in placements if p.writable)
        takes = set(writable)
        table = array("i")
        for first, end, partition in history.map.ranges():
            table.extend([partition if partition in takes else -1] * (end - first))
        stamped = bytes(1 if epoch else 0 for epoch in first_moves(history))
        header = encoded_header(EPOCH_HEADER.encode(), epoch_header(history.epoch)[1])
        return StrictRoute(history.epoch, table.tobytes(), stamped, header, writable)

    def _placement(self, topic: str, p: PartitionImage) -> PartitionRoute:
        cluster = self.image.clusters.get(p.cluster_id)
        present = cluster is not None and (p.physical_topic, p.physical_partition) in cluster.leaders
        readable = present and p.state != "removed" and cluster is not None and cluster.state != "decommissioned"
        writable = present and is_writable(self.image, p)
        return PartitionRoute(
            topic, p.partition, p.cluster_id, p.physical_topic, p.physical_partition, writable, readable
        )

    def leader(self, topic: TopicView, partition: int, producer: bool) -> int:
        """The broker clients should send this partition's requests to, or ``NO_LEADER`` when it takes
        none (for a producer: no writes, unless the topic is strict; for a consumer: nothing to read)."""
        p = topic.placements[partition]
        if not (p.writable if producer else p.readable) and not (producer and topic.strict is not None):
            return NO_LEADER
        return self.brokers[(topic.first_broker + partition) % len(self.brokers)].node_id

    def strict(self, name: str) -> StrictRoute | None:
        """How the gateway places a strict topic's records; None for a topic that is not strict."""
        topic = self.topic(name)
        return topic.strict if topic is not None else None

    def placement(self, name: str, partition: int) -> PartitionRoute | None:
        topic = self.topic(name)
        if topic is None or not 0 <= partition < len(topic.placements):
            return None
        return topic.placements[partition]

    def topic_name_of(self, topic_id: uuid.UUID) -> str | None:
        if self._by_uuid is None:
            self._by_uuid = {topic_uuid(t.topic_id): t.name for t in self.image.topics.values()}
        return self._by_uuid.get(topic_id)

    def logical_of(self, cluster_id: str, physical_topic: str, physical_partition: int) -> tuple[str, int] | None:
        """The logical (topic, partition) a physical partition backs, if any."""
        if self._by_physical is None:
            self._by_physical = {
                (p.cluster_id, p.physical_topic, p.physical_partition): (t.name, p.partition)
                for t in self.image.topics.values()
                for p in t.partitions
            }
        return self._by_physical.get((cluster_id, physical_topic, physical_partition))

    # -- groups ------------------------------------------------------------------------------------
    def coordinator(self, key: str) -> Broker:
        """The broker a group's clients are sent to. Any instance serves any group (its state is in the
        log); the choice only spreads them."""
        return self.brokers[zlib.crc32(key.encode()) % len(self.brokers)]

    def regions(self) -> list[str]:
        return sorted({c.region for c in self.image.clusters.values()})

    def active_clusters(self, region: str) -> list[str]:
        return sorted(c.cluster_id for c in self.image.clusters.values() if c.region == region and c.state == "active")

    def bootstrap_of(self, cluster_id: str) -> str | None:
        cluster = self.image.clusters.get(cluster_id)
        return cluster.bootstrap_servers if cluster is not None else None
