"""A client reset to "earliest" starts at a partition's true first offset, here for the SDK's members. Tansu's
ListOffsets(earliest) now and then answers its second batch's offset (two batches reached an empty partition at
once: 1 topic in 40 with four producers, measured in ``docs/TANSU.md``), and a group reading from there skipped
the first batch. ``metadata_client.brokers`` knows Tansu's log starts at 0: the SDK's members start a partition
without a commit there (the gateway's part is ``tests/unit/gateway/test_fetch_list_offsets.py``). The consumer
here is a stand-in; the paths on real brokers are in the process suites."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import OFFSET_STORED, TopicPartition

from metadata_client import brokers
from metadata_log.image import PartitionLocation
from sdk import brokers as probing
from sdk.consumer import FederatedConsumer


class Consumer:
    """A physical consumer that has no commit of the group, or ``committed``."""

    def __init__(self, committed: int = -1001) -> None:
        self.offset = committed

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, self.offset) for p in partitions]


def start_of(broker: brokers.BrokerKind, consumer: Consumer, reset_to_earliest: bool = True) -> int:
    bootstrap = f"{broker.name}:9092"
    probing._KNOWN[bootstrap] = broker  # as the probe found it
    member = SimpleNamespace(
        group="g", _reset_to_earliest=reset_to_earliest,
        _follower=SimpleNamespace(image=SimpleNamespace(clusters={"c1": SimpleNamespace(bootstrap_servers=bootstrap)})),
    )  # fmt: skip
    start = FederatedConsumer._start_at(member, consumer, PartitionLocation("c1", "T", 0))  # type: ignore[arg-type]
    return int(start.offset)


@pytest.mark.parametrize("broker", [brokers.TANSU, brokers.APACHE_KAFKA], ids=lambda b: b.name)
def test_an_sdk_member_starts_a_partition_without_a_commit_at_tansus_log_start(broker: brokers.BrokerKind) -> None:
    if broker.log_start is None:  # Apache Kafka: librdkafka looks the commit up, then resets by ListOffsets
        assert start_of(broker, Consumer()) == OFFSET_STORED
    else:
        assert start_of(broker, Consumer()) == 0
        assert start_of(broker, Consumer(committed=500)) == 500
    assert start_of(broker, Consumer(), reset_to_earliest=False) == OFFSET_STORED
