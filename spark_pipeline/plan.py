"""Which physical offsets a query reads: pure planning over a metadata image and the brokers' watermarks.

A logical partition is read from its one physical partition (``cluster_id``, ``physical_topic``,
``physical_partition``) between exact offsets ``[start, end)``. Batch reads resolve the partitions once;
streaming reads carry the physical mapping inside each offset (``StreamOffset``), so a micro-batch
replayed from Spark's checkpoint after a crash reads exactly the same records even if the federation
changed meanwhile. No Spark, no network here: the source feeds these functions and unit tests do too.
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from metadata_log.errors import Gone
from metadata_log.image import MetadataImage

from .options import EARLIEST, LATEST, OffsetSpec, SourceOptionError

log = logging.getLogger(__name__)

STREAM_OFFSET_VERSION: Final = 1
LogicalKey = tuple[str, int]  # (logical topic, logical partition)


class DataLossError(Gone):
    """Records the query should read are gone (or a partition went backwards); see ``failOnDataLoss``."""


@dataclass(frozen=True, slots=True)
class SourcePartition:
    """A logical partition and the physical partition that backs it (fixed for the partition's lifetime)."""

    topic: str
    partition: int
    topic_id: str
    cluster_id: str
    physical_topic: str
    physical_partition: int

    @property
    def key(self) -> LogicalKey:
        return (self.topic, self.partition)

    @property
    def physical(self) -> tuple[str, str, int]:
        return (self.cluster_id, self.physical_topic, self.physical_partition)


@dataclass(frozen=True, slots=True)
class Watermarks:
    """The first offset still held (``low``) and the offset the next record will get (``high``)."""

    low: int
    high: int


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """One Spark task: ``[start, end)`` of a physical partition, reported as its logical partition."""

    placement: SourcePartition
    bootstrap: str
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def resolve_placements(image: MetadataImage, topics: Sequence[str], *, require_all: bool) -> list[SourcePartition]:
    """The readable (writable or read-only; not removed) logical partitions of ``topics``.

    ``require_all``: a topic missing from the image is an error (batch); a stream waits for it instead.
    """
    out: list[SourcePartition] = []
    for name in topics:
        topic = image.topics.get(name)
        if topic is None:
            if require_all:
                raise SourceOptionError(
                    "subscribe", f"topic {name!r} does not exist as of metadata offset {image.offset}"
                )
            continue
        for p in topic.partitions:
            if p.state != "removed":
                out.append(
                    SourcePartition(
                        name, p.partition, topic.topic_id, p.cluster_id, p.physical_topic, p.physical_partition
                    )
                )
    return out


def bootstraps(image: MetadataImage, placements: Iterable[SourcePartition]) -> dict[str, str]:
    """Bootstrap servers of the clusters the placements live on."""
    out: dict[str, str] = {}
    for p in placements:
        cluster = image.clusters.get(p.cluster_id)
        if cluster is None:  # apply() never lets a partition point at an unknown cluster
            raise AssertionError(f"partition {p.topic}/{p.partition} is on unregistered cluster {p.cluster_id}")
        out[p.cluster_id] = cluster.bootstrap_servers
    return out


def _spec_offset(spec: OffsetSpec, key: LogicalKey, default: int) -> int:
    if isinstance(spec, str):
        return EARLIEST if spec == "earliest" else LATEST
    return spec.get(key[0], {}).get(key[1], default)


def check_spec_partitions(spec: OffsetSpec, placements: Sequence[SourcePartition], option: str) -> None:
    """A JSON offset naming a logical partition that is not readable is an error, not a silent skip."""
    if isinstance(spec, str):
        return
    readable = {p.key for p in placements}
    for topic, parts in spec.items():
        for partition in parts:
            if (topic, partition) not in readable:
                raise SourceOptionError(option, f"{topic}/{partition} is not a readable logical partition")


def batch_ranges(
    placements: Sequence[SourcePartition],
    cluster_bootstraps: Mapping[str, str],
    watermarks: Mapping[tuple[str, str, int], Watermarks],
    starting: OffsetSpec,
    ending: OffsetSpec,
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """One range per logical partition with data between the starting and ending offsets.

    Partitions not named in a JSON spec start at earliest and end at latest.
    """
    check_spec_partitions(starting, placements, "startingOffsets")
    check_spec_partitions(ending, placements, "endingOffsets")
    out = []
    for p in placements:
        marks = watermarks[p.physical]
        start = _spec_offset(starting, p.key, EARLIEST)
        end = _spec_offset(ending, p.key, LATEST)
        start = marks.low if start == EARLIEST else start
        end = marks.high if end == LATEST else end
        if start < marks.low:
            _lost(fail_on_data_loss, f"{p.topic}/{p.partition}: offsets {start}..{marks.low - 1} are no longer held")
            start = marks.low
        if end > marks.high:
            _lost(fail_on_data_loss, f"{p.topic}/{p.partition}: ends at {end} but holds only up to {marks.high}")
            end = marks.high
        if end > start:
            out.append(OffsetRange(p, cluster_bootstraps[p.cluster_id], start, end))
    return out


def split_ranges(ranges: Sequence[OffsetRange], max_per_task: int, min_partitions: int | None) -> list[OffsetRange]:
    """Split so no task reads more than ``max_per_task`` offsets and there are at least ``min_partitions``
    tasks (when there are that many offsets); pieces of one range are of near-equal size."""
    if max_per_task < 1:
        raise ValueError("max_per_task must be >= 1")
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        pieces = math.ceil(r.size / max_per_task)
        if min_partitions and total > 0 and len(ranges) < min_partitions:
            pieces = max(pieces, math.ceil(min_partitions * r.size / total))
        pieces = max(1, min(pieces, r.size))
        bounds = [r.start + (r.size * i) // pieces for i in range(pieces + 1)]
        out += [replace(r, start=a, end=b) for a, b in itertools.pairwise(bounds) if b > a]
    return out


def spread_over_clusters(ranges: Sequence[OffsetRange]) -> list[OffsetRange]:
    """The ranges in task order: round-robin over the clusters, each cluster's ranges kept in order.

    Spark starts tasks in index order, as many at a time as it has cores. Listed cluster by cluster, the
    tasks running side by side all read from the same broker while the others idle (local[2] over two
    clusters: both tasks on c1, then both on c2)."""
    by_cluster: dict[str, list[OffsetRange]] = {}
    for r in ranges:
        by_cluster.setdefault(r.placement.cluster_id, []).append(r)
    ranked = ((i, cluster_id, r) for cluster_id, rs in by_cluster.items() for i, r in enumerate(rs))
    return [r for _, _, r in sorted(ranked, key=lambda item: (item[0], item[1]))]


def _lost(fail: bool, detail: str) -> None:
    if fail:
        raise DataLossError(f"{detail} (set failOnDataLoss=false to skip what is lost and go on)")
    log.warning("kfed source: data loss: %s", detail)


# -- streaming ------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Position:
    """Where a stream is in one logical partition: the next physical offset, and the mapping it is read by."""

    placement: SourcePartition
    offset: int


@dataclass(frozen=True, slots=True)
class StreamOffset:
    """A streaming offset: a position per logical partition, with the clusters' bootstrap servers.

    As JSON (Spark compares offsets as JSON strings, so keys are strings in a fixed order)::

        {"v": 1, "clusters": {"c1": "127.0.0.1:19092"},
         "topics": {"U_TopicA": {"id": "<topic id>", "partitions":
             {"0": {"cluster": "c1", "topic": "U_TopicA", "partition": 0, "offset": 42}}}}}
    """

    positions: Mapping[LogicalKey, Position]
    clusters: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        topics: dict[str, Any] = {}
        for (topic, partition), pos in sorted(self.positions.items()):
            entry = topics.setdefault(topic, {"id": pos.placement.topic_id, "partitions": {}})
            pl = pos.placement
            entry["partitions"][str(partition)] = {
                "cluster": pl.cluster_id,
                "topic": pl.physical_topic,
                "partition": pl.physical_partition,
                "offset": pos.offset,
            }
        used = sorted({p.placement.cluster_id for p in self.positions.values()})
        return {"v": STREAM_OFFSET_VERSION, "clusters": {c: self.clusters[c] for c in used}, "topics": topics}

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> StreamOffset:
        if doc.get("v") != STREAM_OFFSET_VERSION:
            raise ValueError(f"not a kfed stream offset (version {doc.get('v')!r}): {str(doc)[:200]}")
        positions = {}
        for topic, entry in doc["topics"].items():
            for partition, p in entry["partitions"].items():
                placement = SourcePartition(
                    topic, int(partition), entry["id"], p["cluster"], p["topic"], p["partition"]
                )
                positions[placement.key] = Position(placement, int(p["offset"]))
        return StreamOffset(positions, dict(doc["clusters"]))


EMPTY_STREAM_OFFSET: Final = StreamOffset({}, {})


def initial_positions(
    placements: Sequence[SourcePartition],
    cluster_bootstraps: Mapping[str, str],
    watermarks: Mapping[tuple[str, str, int], Watermarks],
    starting: OffsetSpec,
) -> StreamOffset:
    """Where a new query starts (``startingOffsets``); a restarted one continues from its checkpoint instead."""
    check_spec_partitions(starting, placements, "startingOffsets")
    positions = {}
    for p in placements:
        marks = watermarks.get(p.physical)
        if marks is None:  # its cluster did not answer: start from earliest when it does
            continue
        offset = _spec_offset(starting, p.key, EARLIEST)
        offset = marks.low if offset == EARLIEST else marks.high if offset == LATEST else offset
        positions[p.key] = Position(p, offset)
    return StreamOffset(positions, dict(cluster_bootstraps))


def next_offset(
    start: StreamOffset,
    placements: Sequence[SourcePartition],
    cluster_bootstraps: Mapping[str, str],
    watermarks: Mapping[tuple[str, str, int], Watermarks],
    fail_on_data_loss: bool,
    max_offsets: int | None = None,
    target: StreamOffset | None = None,
) -> StreamOffset:
    """The end of the next micro-batch after ``start``.

    - a partition of ``start`` that is no longer readable (removed, or its topic re-created) is dropped;
    - a partition new to the stream starts at its earliest offset (as Spark's Kafka source does);
    - a partition whose cluster did not answer (no watermarks) keeps its position;
    - ``max_offsets`` spreads at most that many offsets over the partitions, in proportion to their lag;
    - ``target`` (Trigger.AvailableNow) caps each partition at its target and admits no partition that is
      not in it: the run ends once the target is reached.
    """
    current = {p.key: p for p in placements}
    begin: dict[LogicalKey, Position] = {}
    latest: dict[LogicalKey, int] = {}
    for key, pos in start.positions.items():
        placement = current.get(key)
        if placement != pos.placement:
            log.info("kfed source: %s/%s is no longer readable with its old mapping; dropped", *key)
            continue
        marks = watermarks.get(placement.physical)
        if marks is None:
            begin[key], latest[key] = pos, pos.offset
            continue
        offset = pos.offset
        if offset < marks.low:
            _lost(fail_on_data_loss, f"{key[0]}/{key[1]}: offsets {offset}..{marks.low - 1} are no longer held")
            offset = marks.low
        if offset > marks.high:
            _lost(fail_on_data_loss, f"{key[0]}/{key[1]} went back from {offset} to {marks.high} (cluster lost data)")
            offset = marks.low  # the partition was reset: read it again from its start
        begin[key], latest[key] = Position(placement, offset), marks.high
    for key, placement in current.items():
        marks = watermarks.get(placement.physical)
        if key in begin or marks is None:
            continue
        if target is not None and key not in target.positions:
            continue
        begin[key], latest[key] = Position(placement, marks.low), marks.high
    if target is not None:
        for key, pos in begin.items():
            goal = target.positions.get(key)
            if goal is not None and goal.placement == pos.placement:
                latest[key] = max(pos.offset, min(latest[key], goal.offset))
            else:  # unknown when the run began (e.g. its cluster did not answer): nothing of it is due
                latest[key] = pos.offset
    if max_offsets is not None:
        latest = rate_limit({k: p.offset for k, p in begin.items()}, latest, max_offsets)
    positions = {k: Position(p.placement, latest[k]) for k, p in begin.items()}
    clusters = {**start.clusters, **cluster_bootstraps}
    return StreamOffset(positions, clusters)


def rate_limit(begin: Mapping[LogicalKey, int], latest: Mapping[LogicalKey, int], limit: int) -> dict[LogicalKey, int]:
    """Exactly ``min(limit, total lag)`` offsets, spread in proportion to each partition's lag (Spark's rule),
    the rounding remainder going to the largest fractions (ties by partition)."""
    lags = {k: max(0, latest[k] - begin[k]) for k in latest}
    total = sum(lags.values())
    if total <= limit:
        return dict(latest)
    shares = {k: limit * lag // total for k, lag in lags.items()}
    remainder = limit - sum(shares.values())
    by_fraction = sorted(lags, key=lambda k: (-(limit * lags[k] % total), k))
    for k in by_fraction[:remainder]:
        shares[k] += 1
    return {k: begin[k] + shares[k] for k in latest}


def stream_ranges(
    start: StreamOffset,
    end: StreamOffset,
    watermarks_of_new: Mapping[tuple[str, str, int], Watermarks],
    fail_on_data_loss: bool,
) -> list[OffsetRange]:
    """The ranges of the micro-batch ``(start, end]``, read with the mapping recorded in ``end``.

    A partition absent from ``start`` is new: it is read from its earliest offset (``watermarks_of_new``).
    """
    out = []
    for key, pos in sorted(end.positions.items()):
        before = start.positions.get(key)
        if before is not None and before.placement == pos.placement:
            first = before.offset
            if pos.offset < first:  # next_offset saw the partition go backwards and reset it
                marks = watermarks_of_new.get(pos.placement.physical)
                first = marks.low if marks is not None else 0
        else:
            marks = watermarks_of_new.get(pos.placement.physical)
            if marks is None:
                _lost(fail_on_data_loss, f"{key[0]}/{key[1]}: its cluster did not say where the partition starts")
                continue
            first = marks.low
        if pos.offset > first:
            out.append(OffsetRange(pos.placement, end.clusters[pos.placement.cluster_id], first, pos.offset))
    return out


def new_partitions(start: StreamOffset, end: StreamOffset) -> list[SourcePartition]:
    """Placements in ``end`` that ``start`` does not read with the same mapping (they start at earliest)."""
    out = []
    for key, pos in end.positions.items():
        before = start.positions.get(key)
        if before is None or before.placement != pos.placement or pos.offset < before.offset:
            out.append(pos.placement)
    return out
