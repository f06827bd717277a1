"""What differs between the brokers kfed federates, in one place (measured in docs/TANSU.md): the facts, with
no client library (the gateway reads them from its connections' ApiVersions; ``sdk.brokers`` probes with
librdkafka).

Apache Kafka takes the normal path everywhere. Tansu, the light local broker, lacks some APIs and answers
one wrongly:
- ListOffsets(latest) answers the start of the last batch + 1, not the end: true end offsets come from the
  high watermark of a fetch response instead (``exact_list_offsets``);
- ListOffsets(earliest) answers the second batch's offset, now and then, when two batches reached an empty
  partition at once (1 topic in 40 with four producers here): a consumer reset to "earliest" skips the first
  batch. Tansu never deletes a record (retention is not enforced, DeleteRecords is not served, a restart
  empties the whole broker), so its log starts at 0: ``log_start`` says so (None: ask the broker);
- there is no CreatePartitions: a physical topic keeps the partition count it was created with
  (``grows_topics``).

A broker is told apart by the first of those gaps: CreatePartitions is missing from its ApiVersions
(``from_api_keys``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class BrokerKind:
    """A kind of broker and the paths kfed takes on it."""

    name: str
    exact_list_offsets: bool  # ListOffsets(latest) is the end offset (the high watermark)
    grows_topics: bool  # CreatePartitions adds partitions to an existing topic
    log_start: int | None = None  # every partition's first offset, when ListOffsets(earliest) cannot be trusted


APACHE_KAFKA: Final = BrokerKind("kafka", exact_list_offsets=True, grows_topics=True)
TANSU: Final = BrokerKind("tansu", exact_list_offsets=False, grows_topics=False, log_start=0)

CREATE_PARTITIONS_API: Final = 37
"""The Kafka API whose absence from a broker's ApiVersions tells Tansu from Apache Kafka."""


def from_api_keys(api_keys: Collection[int]) -> BrokerKind:
    """The broker that listed these API keys in its ApiVersions answer (what a connection already knows)."""
    return APACHE_KAFKA if CREATE_PARTITIONS_API in api_keys else TANSU
