"""A client reset to "earliest" starts at a partition's true first offset. Tansu's ListOffsets(earliest) now
and then answers its second batch's offset (two batches reached an empty partition at once: 1 topic in 40 with
four producers, measured in ``docs/TANSU.md``), and a group reading from there skipped the first batch: the key
order test lost the first message of 83 keys that way. ``metadata_client.brokers`` knows Tansu's log starts at 0;
the gateway (``gateway/fetch.py``) answers ListOffsets(earliest) with that (the SDK's part is
``tests/unit/sdk/test_sdk_log_start.py``). The brokers here are stand-ins answering as Tansu did; the paths on
real brokers are in the process suites."""

from __future__ import annotations

import asyncio
import dataclasses
from types import SimpleNamespace
from typing import Any

from gateway import fetch
from gateway.view import PartitionRoute
from metadata_client import brokers

SKIPPED_TO = 69  # what Tansu answered for the partition whose first batch a group skipped


@dataclasses.dataclass
class Offsets:  # the fields of a broker's ListOffsets answer the gateway passes on
    partition_index: int
    error_code: int = 0
    timestamp: int = -1
    offset: int = SKIPPED_TO
    leader_epoch: int = 0


class Broker:
    """Answers every ListOffsets with ``SKIPPED_TO``; lists the API keys of Tansu or of Apache Kafka."""

    def __init__(self, tansu: bool) -> None:
        self.versions = {k: (0, 9) for k in range(70) if not (tansu and k == brokers.CREATE_PARTITIONS_API)}

    def version(self, api_key: int) -> int:
        return 7

    async def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        partitions = [Offsets(p["partition_index"]) for t in body["topics"] for p in t["partitions"]]
        return SimpleNamespace(topics=[SimpleNamespace(name="T", partitions=partitions)])


class Cluster:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    async def control(self, address: str) -> Broker:
        return self.broker


def answered(tansu: bool, timestamp: int) -> int:
    placement = PartitionRoute("L", 0, "c1", "T", 0, True, True)
    got = asyncio.run(fetch._list_from(Cluster(Broker(tansu)), "leader", [("L", 0, placement, timestamp)], 0))  # type: ignore[arg-type]
    return int(got[("L", 0)]["offset"])


def test_the_gateway_answers_earliest_with_tansus_log_start_and_passes_kafkas_on() -> None:
    assert answered(tansu=True, timestamp=fetch.EARLIEST) == 0
    assert answered(tansu=False, timestamp=fetch.EARLIEST) == SKIPPED_TO  # Apache Kafka's is right: as it said
    assert answered(tansu=True, timestamp=-1) == SKIPPED_TO  # latest, or a time: the broker's answer
