"""The image written as records (a snapshot), and read back: one writer and one reader per layout.

A snapshot at offset S is the image written as the records that rebuild it from ``EMPTY_IMAGE``; a reader
loads it and continues the log at S + 1. Reading one back replays it with the same ``apply`` as the log, so
it is checked like the log is (``CodecError``, ``InvalidRecord``) and equals the image it was written from.

| layout    | writer          | reader         | what it is                                                   |
|-----------|-----------------|----------------|--------------------------------------------------------------|
| records   | `write_records` | `read_records` | record objects (the JSON form of ``GET /v1/snapshot``)       |
| rows      | `write_rows`    | `read_rows`    | the codec's rows: msgpack snapshots and dumps at version 1   |
| runs      | `write_runs`    | `read_runs`    | the codec's runs: snapshots and dumps at version 2           |

The msgpack *body* of a snapshot is ``{"offset": S, "records": rows}`` or ``{"offset": S, "runs": runs}``;
a node's dump is that body plus its own keys (``pack_body(..., extra)``), and ``read_body`` reads either.
From metadata version 4 the image is written with range records: a topic's placement runs and state runs
(``PartitionRangeAdded``, ``PartitionRangeStateChanged``), each cluster's leaders as ``PhysicalLeadersReported``
of a few thousand partitions each; so the snapshot's size follows the federation's shape, and the leaders
(2 bytes each in the image, about 3 in the snapshot). Before version 4, rows and runs of one record per
partition, written and read without building a record object per partition.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import fields as dataclass_fields
from dataclasses import replace
from itertools import groupby
from typing import Any, Final, Literal

from .codec import (
    PACK_CHUNK_ITEMS,
    PACK_CHUNK_RUNS,
    RecordFields,
    Run,
    decode_rows,
    decode_runs,
    pack_chunked,
    wire_rows,
    wire_runs,
)
from .image import EMPTY_IMAGE, ClusterImage, MetadataDelta, MetadataImage, TopicImage, apply
from .image.key_orders import snapshot_records as key_order_records
from .image.transactions import snapshot_records
from .records import (
    MAX_LEADERS_PER_RECORD,
    PARTITION_STATES,
    RANGES_VERSION,
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    GatewayExpired,
    GatewayRegistered,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    MetadataVersionChanged,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
    QuorumVoterChanged,
    Record,
    TopicCreated,
)

__all__ = [
    "Layout",
    "layout_for",
    "pack_body",
    "read_body",
    "read_records",
    "read_rows",
    "read_runs",
    "write_records",
    "write_rows",
    "write_runs",
]

Layout = Literal["rows", "runs"]
"""The msgpack layouts of a snapshot's body."""

# The shortest allowed path from a new value's initial state to each state: what a snapshot replays.
_CLUSTER_PATH: Final[Mapping[ClusterState, tuple[ClusterState, ...]]] = {
    "active": (),
    "read_only": ("read_only",),
    "draining": ("read_only", "draining"),
    "decommissioned": ("read_only", "draining", "decommissioned"),
}
_PARTITION_PATH: Final[Mapping[PartitionState, tuple[PartitionState, ...]]] = {
    "writable": (),
    "read_only": ("read_only",),
    "removed": ("read_only", "removed"),
}


def _fields(image: MetadataImage) -> Iterator[RecordFields]:
    """The image as (record type, field values), in an order that replays from ``EMPTY_IMAGE``."""
    # A partition cannot be added on a decommissioned cluster, so that last step of a cluster's path is
    # replayed after the topics.
    if image.metadata_version != EMPTY_IMAGE.metadata_version:
        yield MetadataVersionChanged, (image.metadata_version,)
    ranges = image.metadata_version >= RANGES_VERSION
    decommissioned: list[str] = []
    for c in sorted(image.clusters.values(), key=lambda c: c.cluster_id):
        yield ClusterRegistered, (c.cluster_id, c.region, c.bootstrap_servers)
        path = _CLUSTER_PATH[c.state]
        if c.state == "decommissioned":
            path = path[:-1]
            decommissioned.append(c.cluster_id)
        for cluster_state in path:
            yield ClusterStateChanged, (c.cluster_id, cluster_state)
        if c.fenced:
            yield ClusterFenced, (c.cluster_id, c.fenced_reason or "", c.fenced_since_ms or 0)
        yield from _leaders(c, ranges)
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        yield TopicCreated, (t.topic_id, t.name, t.region, t.retention_ms)
        yield from _partitions(t, ranges)
    for cluster_id in decommissioned:
        yield ClusterStateChanged, (cluster_id, "decommissioned")
    for g in sorted(image.groups.values(), key=lambda g: g.group):
        if g.coordinator_id is not None:
            yield GroupCoordinatorAssigned, (g.group, g.coordinator_id)
        if g.generation > 0:
            yield GroupGenerationStarted, (g.group, g.generation, g.members)
    for v in sorted(image.voters.values(), key=lambda v: v.voter_id):
        yield QuorumVoterChanged, (v.voter_id, v.raft, v.http, v.voter)
    for gw in sorted(image.gateways.values(), key=lambda gw: gw.incarnation):  # in the order they registered
        yield GatewayRegistered, (gw.gateway_id, gw.host, gw.port, gw.instance, gw.incarnation, gw.rack, gw.listener)
        if not gw.live:
            yield GatewayExpired, (gw.gateway_id, 0)  # the time of the expiry is not kept
    for txn_record in snapshot_records(image.transactions):
        yield type(txn_record), tuple(getattr(txn_record, name) for name in txn_record.__match_args__)
    # key order: after the topics, whose partitions its ranges name
    for record in key_order_records(image.key_orders):
        yield type(record), tuple(getattr(record, f.name) for f in dataclass_fields(record))


def _leaders(cluster: ClusterImage, ranges: bool) -> Iterator[RecordFields]:
    """A cluster's leaders: per physical topic, ``PhysicalLeadersReported`` of up to ``MAX_LEADERS_PER_RECORD``
    partitions (metadata version 4), or one ``PhysicalPartitionsReported`` per partition, in partition order."""
    if not ranges:
        for (physical_topic, physical_partition), leader in sorted(cluster.leaders.items()):
            yield PhysicalPartitionsReported, (cluster.cluster_id, physical_topic, physical_partition, leader)
        return
    brokers = cluster.leaders.brokers
    for physical_topic, indexes in sorted(cluster.leaders.indexes()):
        for at in range(0, len(indexes), MAX_LEADERS_PER_RECORD):  # a partition without a leader says -1
            leaders = tuple(indexes[at : at + MAX_LEADERS_PER_RECORD])
            yield PhysicalLeadersReported, (cluster.cluster_id, physical_topic, brokers, (at, len(leaders)), leaders)


def _partitions(topic: TopicImage, ranges: bool) -> Iterator[RecordFields]:
    """A topic's partitions and the states they reached: a range per placement run and per run of a state
    (metadata version 4), or a record per partition and per step of its state's path."""
    parts = topic.partitions
    if not ranges:
        for p in parts:
            yield PartitionsAdded, (topic.name, p.partition, p.cluster_id, p.physical_topic, p.physical_partition)
        for p in parts:
            for partition_state in _PARTITION_PATH[p.state]:
                yield PartitionStateChanged, (topic.name, p.partition, partition_state)
        return
    for run in parts.runs:
        yield PartitionRangeAdded, (topic.name, *run)
    if parts.states is None:
        return
    first = 0
    for code, same in groupby(parts.states):
        n = sum(1 for _ in same)
        for partition_state in _PARTITION_PATH[PARTITION_STATES[code]]:
            yield PartitionRangeStateChanged, (topic.name, first, n, partition_state)
        first += n


# -- records ----------------------------------------------------------------------------------------------
def write_records(image: MetadataImage) -> Iterator[Record]:
    """The image as records, one at a time (an encoder that writes slices never holds them all)."""
    return (cls(*fields) for cls, fields in _fields(image))


def read_records(records: Iterable[Record], offset: int) -> MetadataImage:
    """The image that ``records`` (``write_records`` of an image at ``offset``) describe."""
    return replace(apply(EMPTY_IMAGE, records), offset=offset)


# -- rows ---------------------------------------------------------------------------------------------------
def write_rows(image: MetadataImage) -> Iterator[list[Any]]:
    """The image as the codec's rows, one at a time, without record objects."""
    return wire_rows(_fields(image))


def read_rows(rows: Iterable[Any], offset: int) -> MetadataImage:
    """The image that ``rows`` describe (any iterable of rows). Raises ``CodecError`` or ``InvalidRecord``."""
    return _replayed(decode_rows(rows), offset)


# -- runs ---------------------------------------------------------------------------------------------------
def write_runs(image: MetadataImage) -> list[Any]:
    """The image as the codec's runs, without record objects. Each topic's partitions are one run, and so
    are each cluster's leader reports; a topic's name, its cluster, a leader's address are written once per
    run instead of once per partition."""
    return wire_runs(_fields(image))


def read_runs(items: Any, offset: int) -> MetadataImage:
    """The image that ``items`` (``write_runs`` output, decoded) describe. Raises ``CodecError`` or
    ``InvalidRecord``."""
    return _replayed(decode_runs(items), offset)


def _replayed(items: Iterable[Run | Record], offset: int) -> MetadataImage:
    """The image at ``offset`` that decoded items describe. Each run goes to the delta as columns; any other
    record (a row between runs, or one of a run that is not well formed: a row from a newer writer, a value
    of the wrong type) is decoded and replayed one at a time, so the first error is that row's, whether it
    does not decode or does not fit."""
    delta = MetadataDelta(EMPTY_IMAGE)
    for item in items:
        if type(item) is Run:
            delta.replay_run(*item)
        else:
            delta.replay(item)  # type: ignore[arg-type]  # not a Run: a record
    return replace(delta.apply(), offset=offset)


# -- msgpack bodies -------------------------------------------------------------------------------------
def layout_for(image: MetadataImage) -> Layout:
    """Runs once every voter reads them (metadata version 2, see ``MetadataVersionChanged``): a node that
    gets a dump by InstallSnapshot loads it several times faster. Rows before: every version reads them."""
    return "runs" if image.metadata_version >= 2 else "rows"


def pack_body(image: MetadataImage, layout: Layout, extra: Mapping[str, Any] | None = None) -> bytes:
    """msgpack of ``{"offset": S, "records" | "runs": ..., **extra}``, packed a slice at a time (the GIL is
    handed over between slices): a 100M-partition image takes seconds. Garbage collection is not paused here,
    unlike decoding: resumed, it walked everything the encoding had built in one pass holding the GIL, at
    100 M partitions long enough for a leader's followers to elect another (its Raft thread sent no heartbeat
    meanwhile); paused or not, the encoding takes as long."""
    body: dict[str, Any] = {"offset": image.offset}
    if layout == "runs":
        body["runs"] = write_runs(image)
        chunk = PACK_CHUNK_RUNS
    else:
        body["records"] = write_rows(image)
        chunk = PACK_CHUNK_ITEMS
    body.update(extra or {})
    return pack_chunked(body, chunk)


def read_body(body: Mapping[str, Any], offset: int) -> MetadataImage:
    """The image a decoded body holds, in either layout (rows from a writer at metadata version 1, or a
    controller older than runs). Raises ``CodecError``, ``InvalidRecord`` or ``KeyError``."""
    return read_runs(body["runs"], offset) if "runs" in body else read_rows(body["records"], offset)
