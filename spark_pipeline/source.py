"""``kfed``: a Spark Python Data Source reading logical topics straight from the physical clusters.

``spark.read.format("kfed")`` (batch) and ``spark.readStream.format("kfed")`` (micro-batch, with
``Trigger.AvailableNow``) resolve the subscribed topics' logical partitions from the metadata log, ask each
physical cluster for its watermarks, and plan one Spark task per logical partition (large ranges are split).
Each task reads its physical partition between exact offsets and yields Arrow record batches.

Things to know about the Python Data Source API (docs/SPARK.md): ``read()`` runs on a pickled copy of the
reader, so everything a task needs travels in its ``KfedPartition``; readers therefore keep no clients on
``self`` except the stream reader's cached image follower, which is dropped when pickled.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import from_arrow_schema  # pyarrow only; pandas is not imported
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from metadata_client.follower import LogFollower
from metadata_log.heap import freeze_survivors

from .kafka_io import arrow_schema, read_range, watermarks
from .options import SourceOptions, parse_options
from .plan import (
    EMPTY_STREAM_OFFSET,
    OffsetRange,
    SourcePartition,
    StreamOffset,
    Watermarks,
    batch_ranges,
    bootstraps,
    initial_positions,
    new_partitions,
    next_offset,
    resolve_placements,
    split_ranges,
    spread_over_clusters,
    stream_ranges,
)
from .resolve import catch_up, image_at, latest_image

log = logging.getLogger(__name__)


def spark_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema (``topic``/``partition`` are logical) plus ``cluster_id``: derived from the
    Arrow schema the tasks' batches are built with, so the two cannot drift apart."""
    return from_arrow_schema(arrow_schema(include_headers))


class KfedPartition(InputPartition):
    """One task: an offset range of one physical partition, with what reading it needs (pickled)."""

    def __init__(self, index: int, r: OffsetRange, options: SourceOptions) -> None:
        super().__init__(index)
        self.range = r
        self.include_headers = options.include_headers
        self.kafka = dict(options.kafka)
        self.fail_on_data_loss = options.fail_on_data_loss
        self.timeout_s = options.timeout_ms / 1000

    def __repr__(self) -> str:
        p = self.range.placement
        return f"KfedPartition({p.topic}/{p.partition} {p.cluster_id} [{self.range.start}, {self.range.end}))"


_worker_settled = False


def settle_python_worker() -> None:
    """Once per Spark Python worker: collect, then freeze what is alive (the imports of pyspark, pyarrow,
    confluent-kafka and kfed, ~56,000 objects) out of the cyclic garbage collector.

    PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task (``pyspark/daemon.py``).
    Walking those objects takes a sizeable part of a short task's time, and the next task waits for it; frozen,
    they are skipped, and what a task creates is still collected. Nothing is done outside Spark's Python workers
    (``SPARK_PYTHON_RUNTIME``, set by Spark for them), so an application's own process is left alone, nor in
    workers that are not reused (``SPARK_REUSE_WORKER`` unset): they run one task and no collection after it."""
    global _worker_settled
    if (
        _worker_settled
        or os.environ.get("SPARK_PYTHON_RUNTIME") != "PYTHON_WORKER"
        or not os.environ.get("SPARK_REUSE_WORKER")
    ):
        return
    _worker_settled = freeze_survivors()


def _read(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    settle_python_worker()
    if not isinstance(partition, KfedPartition):  # Spark's placeholder when a query has no ranges
        return iter(())
    return read_range(
        partition.range,
        include_headers=partition.include_headers,
        kafka=partition.kafka,
        fail_on_data_loss=partition.fail_on_data_loss,
        timeout_s=partition.timeout_s,
    )


def _tasks(ranges: Sequence[OffsetRange], options: SourceOptions) -> list[InputPartition]:
    split = split_ranges(ranges, options.max_offsets_per_task, options.min_partitions)
    return [KfedPartition(i, r, options) for i, r in enumerate(spread_over_clusters(split))]


def cluster_watermarks(
    placements: Sequence[SourcePartition],
    cluster_bootstraps: Mapping[str, str],
    options: SourceOptions,
    *,
    strict: bool,
) -> dict[tuple[str, str, int], Watermarks]:
    """Watermarks of every placement, one consumer per cluster, clusters asked in parallel.

    ``strict``: a cluster that does not answer fails the query (batch); otherwise its partitions are left
    out (a stream keeps their positions and retries next micro-batch).
    """
    by_cluster: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for p in placements:
        by_cluster[p.cluster_id].append((p.physical_topic, p.physical_partition))

    def ask(cluster_id: str) -> dict[tuple[str, str, int], Watermarks]:
        marks = watermarks(
            cluster_bootstraps[cluster_id],
            by_cluster[cluster_id],
            end_offsets_from=options.end_offsets_from,
            timeout_s=options.timeout_ms / 1000,
            kafka=options.kafka,
        )
        return {(cluster_id, t, p): m for (t, p), m in marks.items()}

    out: dict[tuple[str, str, int], Watermarks] = {}
    if not by_cluster:
        return out
    with ThreadPoolExecutor(max_workers=min(8, len(by_cluster))) as pool:
        futures = {cid: pool.submit(ask, cid) for cid in sorted(by_cluster)}
        for cid, future in futures.items():
            try:
                out.update(future.result())
            except Exception as e:
                if strict:
                    raise RuntimeError(f"kfed source: cluster {cid} ({cluster_bootstraps[cid]}): {e}") from e
                log.warning("kfed source: cluster %s did not answer (%s); its partitions wait", cid, e)
    return out


class KfedBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        settle_python_worker()
        o = self.options
        timeout_s = o.timeout_ms / 1000
        image = (
            image_at(o.controllers, o.metadata_offset, timeout_s, o.access, o.topics)
            if o.metadata_offset is not None
            else latest_image(o.controllers, timeout_s, o.access, o.topics)
        )
        placements = resolve_placements(image, o.topics, require_all=True)
        clusters = bootstraps(image, placements)
        marks = cluster_watermarks(placements, clusters, o, strict=True)
        ranges = batch_ranges(placements, clusters, marks, o.starting, o.ending, o.fail_on_data_loss)
        log.info(
            "kfed source: metadata offset %d, %d ranges of %d records",
            image.offset,
            len(ranges),
            sum(r.size for r in ranges),
        )
        return _tasks(ranges, o)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)


class KfedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``StreamOffset`` JSON: a physical position per logical partition plus its mapping."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: StreamOffset | None = None
        self._follower: LogFollower | None = None  # the driver's view of the log, kept between micro-batches

    def __getstate__(self) -> dict[str, Any]:
        return {"options": self.options, "_target": None, "_follower": None}

    def _current(self) -> tuple[list[SourcePartition], dict[str, str], dict[tuple[str, str, int], Watermarks]]:
        o = self.options
        if self._follower is None:
            self._follower = LogFollower(
                o.controllers, wait_ms=0, timeout_s=o.timeout_ms / 1000, access=o.access, topics=o.topics
            )
        image = catch_up(self._follower)
        placements = resolve_placements(image, o.topics, require_all=False)
        clusters = bootstraps(image, placements)
        return placements, clusters, cluster_watermarks(placements, clusters, o, strict=False)

    def initialOffset(self) -> dict[str, Any]:
        placements, clusters, marks = self._current()
        return initial_positions(placements, clusters, marks, self.options.starting).to_json()

    def prepareForTriggerAvailableNow(self) -> None:
        placements, clusters, marks = self._current()
        self._target = next_offset(EMPTY_STREAM_OFFSET, placements, clusters, marks, self.options.fail_on_data_loss)
        log.info("kfed source: AvailableNow target %s", self._target.to_json())

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        placements, clusters, marks = self._current()
        max_offsets = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = next_offset(
            StreamOffset.from_json(start),
            placements,
            clusters,
            marks,
            self.options.fail_on_data_loss,
            max_offsets,
            self._target,
        )
        return end.to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, finish = StreamOffset.from_json(start), StreamOffset.from_json(end)
        fresh = new_partitions(begin, finish)
        marks = cluster_watermarks(fresh, finish.clusters, self.options, strict=True) if fresh else {}
        return _tasks(stream_ranges(begin, finish, marks, self.options.fail_on_data_loss), self.options)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the clusters

    def stop(self) -> None:
        if self._follower is not None:
            self._follower.stop()
            self._follower = None


class KfedDataSource(DataSource):
    """``format("kfed")``. Options are checked when the schema is asked for, i.e. at ``load()``."""

    @classmethod
    def name(cls) -> str:
        return "kfed"

    def schema(self) -> StructType:
        return spark_schema(parse_options(self.options, "any").include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KfedBatchReader(parse_options(self.options, "batch"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KfedStreamReader(parse_options(self.options, "stream"))
