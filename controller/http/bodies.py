"""The request bodies of the API: pydantic models that refuse unknown fields, with every number bounded.

They are the contract clients write to (and what ``/docs`` shows); routes only read them.
"""

from __future__ import annotations

from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, Field

from metadata_log.image.partitions import MAX_PHYSICAL_PARTITION

from ..groups import SESSION_TIMEOUT_MS_DEFAULT, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN

INT64_MAX: Final = 2**63 - 1  # offsets and times: what Kafka and msgpack carry
INT32_MAX: Final = 2**31 - 1  # Kafka partition ids


_Partition = Annotated[int, Field(ge=0, le=INT32_MAX)]
_Offset = Annotated[int, Field(ge=0, le=INT64_MAX)]
_Epoch = Annotated[int, Field(ge=1, le=INT64_MAX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegisterCluster(_Strict):
    cluster_id: str = Field(description="Unique id of the physical cluster, e.g. 'c1'.")
    region: str = Field(description="Federation group the cluster serves; topics of a region spread over its clusters.")
    bootstrap_servers: str = Field(description="Kafka bootstrap list, 'host:port[,host:port...]'.")


class ChangeState(_Strict):
    state: str = Field(description="Target state.")


class CreateTopic(_Strict):
    name: str = Field(description="Logical topic name.")
    region: str = Field(description="Region whose active clusters take the partitions.")
    partitions_per_cluster: int = Field(le=INT32_MAX, description="Logical partitions placed on each active cluster.")
    physical_topic: str | None = Field(None, description="Physical topic name; defaults to the logical name.")
    retention_ms: int | None = Field(None, le=INT64_MAX, description="Retention of the data (used by drain decisions).")
    key_order: str = Field("none", description="'strict': per-key order across resizes (docs/KEY_ORDER.md); 'none'.")


class AddPartitions(_Strict):
    cluster_id: str = Field(description="Cluster that takes the new partitions.")
    count: int = Field(le=INT32_MAX, description="How many logical partitions to add.")
    physical_topic: str | None = Field(None, description="Physical topic name; defaults to the logical name.")


class ShrinkPartitions(_Strict):
    partitions: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(
        min_length=1,
        max_length=100_000,
        description="Logical partition ids to retire (read_only now, removed once drained).",
    )


class AddVoter(_Strict):
    id: int = Field(ge=0, le=INT32_MAX, description="The new node's id (its --node-id).")
    raft: str = Field(description="Its Raft address, 'host:port'.")
    http: str = Field(description="Its HTTP base URL.")


class DrainedPartition(_Strict):
    physical_topic: str
    physical_partition: int = Field(ge=0, le=INT32_MAX)
    start: int = Field(ge=0, le=INT64_MAX, description="First offset the cluster still holds.")
    end: int = Field(ge=0, le=INT64_MAX, description="Next offset to be written (the high watermark).")
    committed: dict[str, Annotated[int, Field(ge=-1, le=INT64_MAX)]] = Field(
        default_factory=dict, max_length=10_000, description="Committed offset per consumer group with a commit here."
    )


class DrainReport(_Strict):
    partitions: list[DrainedPartition] = Field(max_length=100_000)


class Heartbeat(_Strict):
    applied_offset: int = Field(-1, ge=-1, le=INT64_MAX, description="Last metadata offset the agent has applied.")
    healthy: bool = Field(True, description="False when the agent's probe of its cluster failed.")
    reason: str | None = Field(None, max_length=500, description="Why the cluster is unhealthy.")


class ReportedPartition(_Strict):
    physical_topic: str
    physical_partition: int = Field(ge=0, le=MAX_PHYSICAL_PARTITION)
    leader: str | None = Field(description="Leader endpoint 'host:port', or null when there is none.")


class ReportedLeaders(_Strict):
    """One physical topic's leaders in compact form (what an agent of a large cluster sends)."""

    physical_topic: str
    brokers: list[str] = Field(max_length=10_000, description="The leaders' 'host:port' endpoints.")
    ranges: list[int] = Field(max_length=200_000, description="(first partition, count) pairs, flattened.")
    leaders: list[int] = Field(
        max_length=100_000, description="Per partition the ranges cover, in order: its leader's index, -1 for none."
    )


class PartitionReport(_Strict):
    partitions: list[ReportedPartition] = Field(default_factory=list, max_length=100_000)
    leaders: list[ReportedLeaders] = Field(
        default_factory=list, max_length=10_000, description="Instead of partitions: the same in compact form."
    )


class GroupHeartbeat(_Strict):
    member_id: str | None = Field(None, max_length=200, description="Null to join; then the id returned.")
    topics: list[str] = Field(max_length=100, description="Logical topics the member subscribes to.")
    owned: list[tuple[str, int]] = Field(
        default_factory=list, max_length=100_000, description="Logical partitions the member consumes right now."
    )
    session_timeout_ms: int = Field(
        SESSION_TIMEOUT_MS_DEFAULT,
        ge=SESSION_TIMEOUT_MS_MIN,
        le=SESSION_TIMEOUT_MS_MAX,
        description="The member is dropped (and stops consuming) after this long without a heartbeat.",
    )
    # strict key order (docs/KEY_ORDER.md decision 4)
    metadata_offset: int = Field(-1, ge=-1, le=INT64_MAX, description="Offset of the metadata the member acts on.")
    committed: list[tuple[str, _Partition, _Offset]] = Field(
        default_factory=list,
        max_length=100_000,
        description="[topic, partition, offset]: the group's committed offsets on strict partitions the member owns.",
    )
    give_up: list[tuple[str, _Epoch, _Partition]] = Field(
        default_factory=list,
        max_length=1_000,
        description="[topic, epoch, partition]: parents the member waited kfed.key.order.max.wait.ms for.",
    )


class GroupLeave(_Strict):
    member_id: str = Field(max_length=200)


# -- key order ----------------------------------------------------------------------------------
class ChangeKeyOrder(_Strict):
    key_order: str = Field(description="'strict' (per-key order across resizes) or 'none'.")


class KeySeals(_Strict):
    topic: str = Field(description="The strict logical topic.")
    epoch: int = Field(ge=0, le=INT64_MAX, description="The epoch whose seals were measured (the latest).")
    end_offsets: dict[Annotated[int, Field(ge=0, le=INT32_MAX)], Annotated[int, Field(ge=0, le=INT64_MAX)]] = Field(
        max_length=100_000, description="Logical partition -> its physical end offset (the seal)."
    )
