"""The federation as one Kafka cluster (``gateway/view.py``): pure, from images built with the log's apply."""

from __future__ import annotations

import uuid
from array import array

from gateway.view import NO_LEADER, Broker, ClusterView, topic_uuid
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.image.key_order_history import next_change, strict_topic
from metadata_log.image.key_orders import epoch_records
from metadata_log.keymap import KEY_SLOTS
from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    GatewayExpired,
    GatewayRegistered,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicKeyOrderChanged,
)

TOPIC_ID = "3f2b7a52-0c1e-4c55-9a53-7d1f4b3c2a10"
SELF = Broker(0, "127.0.0.1", 9092, None)


def federation(*more: Record) -> MetadataImage:
    """U_TopicA: P0-P3 on c1, P4-P7 on c2, every physical partition present; gateways 0, 1 and 2 live."""
    records: list[Record] = [ClusterRegistered("c1", "r1", "h:1"), ClusterRegistered("c2", "r1", "h:2"),
                             TopicCreated(TOPIC_ID, "U_TopicA", "r1")]  # fmt: skip
    for p in range(8):
        cluster = "c1" if p < 4 else "c2"
        records.append(PartitionsAdded("U_TopicA", p, cluster, "U_TopicA", p % 4))
        records.append(PhysicalPartitionsReported(cluster, "U_TopicA", p % 4, "h:1"))
    for i in range(3):
        records.append(GatewayRegistered(i, "127.0.0.1", 9092 + i, f"instance-{i}", i + 1))
    return apply(EMPTY_IMAGE, [*records, *more])


def leaders(view: ClusterView, producer: bool) -> list[int]:
    topic = view.topic("U_TopicA")
    assert topic is not None
    return [view.leader(topic, p, producer) for p in range(len(topic.placements))]


def test_the_brokers_are_the_live_gateways_and_leaders_spread_over_them() -> None:
    view = ClusterView(federation(), SELF)
    assert [b.node_id for b in view.brokers] == [0, 1, 2]
    led = leaders(view, producer=True)
    assert sorted(led.count(node) for node in (0, 1, 2)) == [2, 3, 3]


def test_an_expired_gateway_leaves_and_its_partitions_move_to_the_others() -> None:
    view = ClusterView(federation(GatewayExpired(1, 5)), SELF)
    assert [b.node_id for b in view.brokers] == [0, 2]
    assert set(leaders(view, producer=True)) == {0, 2}


def test_the_answering_gateway_is_a_broker_even_before_the_log_lists_it() -> None:
    view = ClusterView(federation(), Broker(7, "10.0.0.7", 9092, None))
    assert [b.node_id for b in view.brokers] == [0, 1, 2, 7]
    alone = ClusterView(apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")]), SELF)
    assert alone.brokers == (SELF,)


def test_every_instance_answers_the_same_leaders() -> None:
    image = federation()
    views = [ClusterView(image, Broker(i, "127.0.0.1", 9092 + i, None)) for i in range(3)]
    assert leaders(views[0], True) == leaders(views[1], True) == leaders(views[2], True)
    assert views[0].coordinator("g1") == views[2].coordinator("g1")


def test_read_only_partitions_have_no_leader_for_producers_but_one_for_consumers() -> None:
    view = ClusterView(federation(PartitionStateChanged("U_TopicA", 2, "read_only")), SELF)
    assert leaders(view, producer=True)[2] == NO_LEADER
    assert leaders(view, producer=False)[2] != NO_LEADER
    assert all(leader != NO_LEADER for p, leader in enumerate(leaders(view, producer=True)) if p != 2)


def test_a_fenced_or_read_only_cluster_takes_no_writes_and_stays_readable() -> None:
    for change in (ClusterFenced("c2", "lease expired", 1), ClusterStateChanged("c2", "read_only")):
        view = ClusterView(federation(change), SELF)
        assert [leader == NO_LEADER for leader in leaders(view, producer=True)] == [False] * 4 + [True] * 4
        assert NO_LEADER not in leaders(view, producer=False)


def test_removed_partitions_keep_their_dense_id_with_no_leader_for_anyone() -> None:
    view = ClusterView(federation(PartitionStateChanged("U_TopicA", 5, "read_only"),
                                  PartitionStateChanged("U_TopicA", 5, "removed")), SELF)  # fmt: skip
    topic = view.topic("U_TopicA")
    assert topic is not None
    assert [p.partition for p in topic.placements] == list(range(8)), "ids stay dense"
    assert leaders(view, producer=True)[5] == leaders(view, producer=False)[5] == NO_LEADER


def test_a_partition_whose_physical_topic_is_missing_has_no_leader_yet() -> None:
    image = federation(PartitionsAdded("U_TopicA", 8, "c1", "U_TopicA", 4))
    view = ClusterView(image, SELF)
    assert leaders(view, producer=True)[8] == leaders(view, producer=False)[8] == NO_LEADER


def test_topic_ids_are_kfed_ids_and_physical_partitions_map_back() -> None:
    view = ClusterView(federation(), SELF)
    topic = view.topic("U_TopicA")
    assert topic is not None and topic.topic_id == uuid.UUID(TOPIC_ID)
    assert view.topic_name_of(uuid.UUID(TOPIC_ID)) == "U_TopicA"
    assert view.logical_of("c2", "U_TopicA", 1) == ("U_TopicA", 5)
    assert topic_uuid("not-a-uuid") == topic_uuid("not-a-uuid") != topic_uuid("other")
    assert topic_uuid(str(uuid.UUID(int=0))).int > 1, "Kafka's reserved ids are never handed out"


def test_clients_are_told_only_of_gateways_whose_listener_has_the_same_security() -> None:
    image = federation(GatewayRegistered(7, "10.0.0.7", 9093, "tls", 9, None, "SASL_SSL"))
    plain = ClusterView(image, SELF)
    secured = ClusterView(image, Broker(7, "10.0.0.7", 9093, None), "SASL_SSL")
    assert [b.node_id for b in plain.brokers] == [0, 1, 2]
    assert [b.node_id for b in secured.brokers] == [7]
    assert set(leaders(secured, producer=True)) == {7}


def test_a_strict_topic_has_leaders_for_producers_everywhere_and_places_keys_by_its_epoch() -> None:
    """The gateway places a strict topic's records itself: producers may send any partition anything."""
    first = strict_topic(range(8))
    shrunk = next_change(first, [p for p in range(8) if p != 2], "U_TopicA shrunk")
    assert shrunk is not None
    records = [TopicKeyOrderChanged("U_TopicA", "strict"), *epoch_records("U_TopicA", first.changes[0]),
               PartitionStateChanged("U_TopicA", 2, "read_only"), *epoch_records("U_TopicA", shrunk)]  # fmt: skip
    view = ClusterView(federation(*records), SELF)
    assert NO_LEADER not in leaders(view, producer=True), "P2 takes no writes, yet its keys are placed elsewhere"
    route = view.strict("U_TopicA")
    assert route is not None and route.epoch == 2 and view.strict("nope") is None
    targets = array("i", route.table)
    assert len(targets) == len(route.stamped) == KEY_SLOTS
    assert set(targets) == {0, 1, 3, 4, 5, 6, 7} and 2 not in route.writable
    moved = {s for m in shrunk.moves for s in range(m.first_slot, m.end_slot)}
    assert moved and {s for s, stamp in enumerate(route.stamped) if stamp} == moved, "only moved slots are stamped"
    assert route.header.endswith(b"kfed-epoch\x022"), "stamped with the epoch"

    fenced = ClusterView(federation(*records, ClusterFenced("c2", "lease expired", 1)), SELF)
    route = fenced.strict("U_TopicA")
    assert route is not None and set(array("i", route.table)) == {0, 1, 3, -1}, "c2's keys wait for the fence's epoch"
