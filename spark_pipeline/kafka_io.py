"""The physical side of the ``kfed`` source: watermarks of physical partitions, and reading one range.

This is the only module of ``spark_pipeline`` that talks to brokers (confluent-kafka). The end of a
partition is its high watermark: by default (``end_offsets_from="auto"``) Apache Kafka's from ListOffsets,
the normal path, and Tansu's — whose ListOffsets(latest) is wrong (``metadata_client.brokers``, docs/TANSU.md) —
from a fetch response; ``"fetch"`` and ``"list"`` choose one path for every broker.

A task reads its physical partition with ``assign()`` from its start offset and stops at its end offset
or at partition EOF — never by counting messages — and yields Arrow record batches built column by
column (the schema of Spark's Kafka source, with the logical topic and partition, plus ``cluster_id``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import OFFSET_END, Consumer, KafkaError, Message, TopicPartition

from metadata_log.errors import Unavailable
from metadata_log.heap import gc_paused
from sdk.brokers import BrokerUnknown, broker_at

from .plan import DataLossError, OffsetRange, Watermarks

CONSUME_BATCH: Final = 10_000
"""Messages taken from librdkafka per ``consume()`` call, and so the most rows of one Arrow batch."""
POLL_S: Final = 0.1
"""Longest wait of one ``consume()`` call: it returns early only when its batch is full."""

# Message methods, called per message by ``map`` in C (no Python loop): per 10,000-message batch
_error, _key, _value, _timestamp = Message.error, Message.key, Message.value, Message.timestamp

HEADERS_TYPE: Final = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow form of the source's Spark schema (it must match exactly: ``string``, ``timestamp[us, UTC]``)."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    fields.append(pa.field("cluster_id", pa.string()))
    return pa.schema(fields)


def consumer_config(bootstrap: str, kafka: Mapping[str, str], fail_on_data_loss: bool) -> dict[str, Any]:
    """confluent-kafka settings for reading exact ranges with ``assign()`` (docs/TANSU.md: the fetch back-off
    and queue sizes matter ~6x); ``kafka.*`` options of the source override the tunables."""
    return {
        "enable.metrics.push": False,
        "fetch.queue.backoff.ms": 10,
        "fetch.wait.max.ms": 10,
        "queued.min.messages": 200_000,
        "isolation.level": "read_uncommitted",
        **kafka,
        "bootstrap.servers": bootstrap,
        "group.id": "kfed-spark",  # required by librdkafka even with assign(); nothing is committed
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        # below the low watermark: an error we report (failOnDataLoss), or a jump to what is still held
        "auto.offset.reset": "earliest" if not fail_on_data_loss else "error",
    }


class ClusterUnavailable(Unavailable):
    """A physical cluster did not answer in time."""


def watermarks(
    bootstrap: str,
    partitions: Sequence[tuple[str, int]],
    *,
    end_offsets_from: str = "auto",
    timeout_s: float = 10.0,
    kafka: Mapping[str, str] | None = None,
) -> dict[tuple[str, int], Watermarks]:
    """(low, high) watermark of each physical (topic, partition) of one cluster.

    ``list``: the high watermark from ListOffsets; ``fetch``: from fetch responses (assign at the end, wait
    for partition EOF: right on Tansu too); ``auto``: ``list`` unless the broker is Tansu. The low watermark
    is ListOffsets(earliest), except on a broker whose log start is known (``metadata_client.brokers``: Tansu's is 0).
    """
    if not partitions:
        return {}
    try:
        broker = broker_at(bootstrap, timeout_s)
    except BrokerUnknown as e:
        raise ClusterUnavailable(f"{bootstrap}: {e}") from None
    if end_offsets_from == "auto":
        end_offsets_from = "list" if broker.exact_list_offsets else "fetch"
    consumer = Consumer(consumer_config(bootstrap, kafka or {}, fail_on_data_loss=True))
    deadline = time.monotonic() + timeout_s
    try:
        lows = {}
        for topic, partition in partitions:
            low, high = _list_watermarks(consumer, topic, partition, deadline, bootstrap)
            lows[(topic, partition)] = (low if broker.log_start is None else broker.log_start, high)
        if end_offsets_from == "list":
            return {tp: Watermarks(low, high) for tp, (low, high) in lows.items()}
        highs = _tansu_high_watermarks(consumer, partitions, deadline, bootstrap)
        return {tp: Watermarks(lows[tp][0], highs[tp]) for tp in partitions}
    finally:
        consumer.close()


def _list_watermarks(
    consumer: Consumer, topic: str, partition: int, deadline: float, bootstrap: str
) -> tuple[int, int]:
    """ListOffsets(earliest, latest), asked again while the broker has none to give (-1001: a new leader whose
    high watermark is not settled, for a few seconds after a broker dies)."""
    while True:
        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(0.1, deadline - time.monotonic()), cached=False
            )
        except Exception as e:  # KafkaException: timed out, unknown partition, transport
            raise ClusterUnavailable(f"{bootstrap}: no watermarks for {topic}[{partition}]: {e}") from e
        if low >= 0 and high >= 0:
            return int(low), int(high)
        if time.monotonic() >= deadline:
            raise ClusterUnavailable(f"{bootstrap}: {topic}[{partition}] has no settled offsets (a leader change?)")
        time.sleep(0.1)


def _tansu_high_watermarks(
    consumer: Consumer, partitions: Sequence[tuple[str, int]], deadline: float, bootstrap: str
) -> dict[tuple[str, int], int]:
    """The high watermark each partition's fetch responses report: assign at the end, consume to EOF (what
    Tansu, whose ListOffsets(latest) is wrong, needs; right on every broker, at a fetch round trip's cost)."""
    consumer.assign([TopicPartition(t, p, OFFSET_END) for t, p in partitions])
    highs: dict[tuple[str, int], int] = {}
    try:
        while len(highs) < len(partitions):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                missing = sorted(set(partitions) - set(highs))
                raise ClusterUnavailable(f"{bootstrap}: no fetch response for {missing[:5]} in time")
            # returns once an event per partition still missing is in (else after the wait); asking for a
            # full batch made every call wait out its timeout
            for msg in consumer.consume(min(CONSUME_BATCH, len(partitions) - len(highs)), min(0.1, remaining)):
                err = msg.error()
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    highs[(str(msg.topic()), _offset(msg, partition=True))] = _offset(msg)
                elif err is not None and err.fatal():
                    raise ClusterUnavailable(f"{bootstrap}: {err.str()}")
    finally:
        consumer.unassign()
    return highs


def read_range(
    r: OffsetRange,
    *,
    include_headers: bool,
    kafka: Mapping[str, str],
    fail_on_data_loss: bool,
    timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """The records of ``[r.start, r.end)`` as Arrow batches, in offset order."""
    schema = arrow_schema(include_headers)
    p = r.placement
    consumer = _cached_consumer(consumer_config(r.bootstrap, kafka, fail_on_data_loss))
    try:
        consumer.assign([TopicPartition(p.physical_topic, p.physical_partition, r.start)])
        position = r.start
        last_progress = time.monotonic()
        while position < r.end:
            # A batch is up to 10,000 Message objects (GC-tracked), all dropped once converted: the cyclic
            # collector would only walk them again and again (a fifth of the reading CPU), so it waits.
            with gc_paused():
                # never more than what is left: the call then returns as soon as the range is complete
                msgs = consumer.consume(min(CONSUME_BATCH, r.end - position), POLL_S)
                data = msgs if not any(map(_error, msgs)) else [m for m in msgs if m.error() is None]
                if len(data) < len(msgs):  # events: partition EOF, errors
                    position = _check_events(msgs, position, r, fail_on_data_loss)
                batch = None
                if data:
                    last_progress = time.monotonic()
                    if _offset(data[-1]) >= r.end:
                        data = [m for m in data if _offset(m) < r.end]
                    if data:
                        position = _offset(data[-1]) + 1
                        batch = _to_arrow(data, p.topic, p.partition, p.cluster_id, include_headers, schema)
                    else:
                        position = r.end
                elif time.monotonic() - last_progress > timeout_s:
                    raise ClusterUnavailable(
                        f"no records from {p.cluster_id} ({r.bootstrap}) {p.physical_topic}[{p.physical_partition}] "
                        f"at offset {position} for {timeout_s:.0f} s (kfed.timeoutMs)"
                    )
                del msgs, data  # freed here, inside the pause: the collector never sees them
            if batch is not None:
                yield batch
    finally:
        consumer.unassign()  # stops its fetching; the connection stays for the next task in this worker


def _check_events(msgs: list[Message], position: int, r: OffsetRange, fail_on_data_loss: bool) -> int:
    """Act on the events among consumed messages (partition EOF, errors); the position to go on from."""
    p = r.placement
    for msg in msgs:
        err = msg.error()
        if err is None:
            continue
        if err.code() == KafkaError._PARTITION_EOF:
            eof_at = _offset(msg)
            if eof_at < r.end and eof_at >= position:
                where = f"{p.cluster_id} {p.physical_topic}[{p.physical_partition}]"
                detail = f"{p.topic}/{p.partition} ({where}) ends at {eof_at}, before {r.end}: records lost"
                if fail_on_data_loss:
                    raise DataLossError(detail + " (set failOnDataLoss=false to go on)")
                position = r.end
            continue
        detail = f"reading {p.topic}/{p.partition} from {p.cluster_id} ({r.bootstrap}): {err.str()}"
        if err.code() == KafkaError._AUTO_OFFSET_RESET or err.code() == KafkaError.OFFSET_OUT_OF_RANGE:
            raise DataLossError(detail + " (set failOnDataLoss=false to skip what is lost)")
        if err.fatal() or not err.retriable():
            raise RuntimeError(detail)
    return position


_CONSUMERS: dict[tuple[tuple[str, str], ...], Consumer] = {}
MAX_CACHED_CONSUMERS: Final = 16


def _cached_consumer(config: Mapping[str, Any]) -> Consumer:
    """One consumer per configuration in this Python worker, kept across tasks (Spark reuses workers and
    runs one task at a time in each): a task starts without connecting and fetching metadata again."""
    key = tuple(sorted((k, str(v)) for k, v in config.items()))
    consumer = _CONSUMERS.get(key)
    if consumer is None:
        if len(_CONSUMERS) >= MAX_CACHED_CONSUMERS:
            _CONSUMERS.pop(next(iter(_CONSUMERS))).close()
        consumer = _CONSUMERS[key] = Consumer(dict(config))
    return consumer


def _offset(msg: Message, partition: bool = False) -> int:
    """A consumed message's offset (or partition): always set on messages and EOF events."""
    value = msg.partition() if partition else msg.offset()
    if value is None:
        raise AssertionError(f"a consumed message without {'partition' if partition else 'offset'}: {msg!r}")
    return value


_IOTA: Final = pa.array(range(CONSUME_BATCH), pa.int64())  # offsets of a gap-free batch: first + _IOTA[:n]


def _to_arrow(
    msgs: list[Message], topic: str, partition: int, cluster_id: str, include_headers: bool, schema: pa.Schema
) -> pa.RecordBatch:
    """One record batch from consumed messages, a column at a time (one C-level pass per column)."""
    n = len(msgs)
    kinds_list, millis_list = zip(*map(_timestamp, msgs), strict=True)
    kinds = pa.array(kinds_list, pa.int32())
    # librdkafka: 0 not available, 1 create time, 2 log append time; Spark: -1, 0, 1
    spark_kinds = pc.subtract(kinds, pa.scalar(1, pa.int32()))
    micros = pc.multiply(pa.array(millis_list, pa.int64()), pa.scalar(1000, pa.int64()))
    micros = micros.cast(pa.timestamp("us", tz="UTC"))
    if pc.min(kinds).as_py() == 0:
        micros = pc.if_else(pc.equal(kinds, 0), pa.scalar(None, micros.type), micros)
    first, last = _offset(msgs[0]), _offset(msgs[-1])
    if last - first == n - 1 and n <= CONSUME_BATCH:  # offsets only grow: no gap in between
        offsets = pc.add(_IOTA.slice(0, n), pa.scalar(first, pa.int64()))
    else:  # gaps: transaction markers, compaction
        offsets = pa.array([m.offset() for m in msgs], pa.int64())
    columns = [
        pa.array(list(map(_key, msgs)), pa.binary()),
        pa.array(list(map(_value, msgs)), pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        offsets,
        micros,
        spark_kinds,
    ]
    if include_headers:
        columns.append(pa.array([m.headers() for m in msgs], HEADERS_TYPE))
    columns.append(pa.repeat(pa.scalar(cluster_id, pa.string()), n))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
