"""The warehouse layers as pure ``DataFrame -> DataFrame`` functions (tested without Kafka).

- ODS: the raw messages as they arrived, with their lineage, partitioned by arrival date and hour;
- DWD: events parsed (see ``events.py``), typed, invalid ones dropped, deduplicated by message id;
- DWS: per-minute aggregates by event type;
- audit: per producer and window, the audited count against the distinct events that arrived.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from .events import AUDIT_WINDOW_MS

EVENT_SCHEMA = StructType(
    [
        StructField("id", StringType()),
        StructField("producer", StringType()),
        StructField("seq", LongType()),
        StructField("event_time_ms", LongType()),
        StructField("type", StringType()),
        StructField("user_id", StringType()),
        StructField("amount", DoubleType()),
    ]
)
AUDIT_SCHEMA = StructType(
    [
        StructField("producer", StringType()),
        StructField("topic", StringType()),
        StructField("window_start_ms", LongType()),
        StructField("window_ms", LongType()),
        StructField("count", LongType()),
    ]
)


def ods(raw: DataFrame) -> DataFrame:
    """Rows of the ``kfed`` source -> ODS: value as text, lineage, arrival ``dt`` (yyyy-MM-dd) and ``hour``."""
    return raw.select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        "cluster_id",
        F.col("timestamp").alias("ingest_time"),
        F.date_format("timestamp", "yyyy-MM-dd").alias("dt"),
        F.hour("timestamp").alias("hour"),
    )


def dwd(ods_rows: DataFrame) -> DataFrame:
    """ODS -> DWD: parse the JSON value, keep events with an id, a producer and an event time, type the
    columns, and keep one row per id (the first that arrived: by ingest time, then partition and offset)."""
    parsed = ods_rows.select("*", F.from_json("value", EVENT_SCHEMA).alias("e"))
    valid = parsed.where(
        F.col("e.id").isNotNull() & F.col("e.producer").isNotNull() & F.col("e.event_time_ms").isNotNull()
    )
    first = Window.partitionBy("e.id").orderBy("ingest_time", "topic", "partition", "offset")
    event_time = F.timestamp_millis(F.col("e.event_time_ms"))
    return (
        valid.withColumn("_n", F.row_number().over(first))
        .where(F.col("_n") == 1)
        .select(
            F.col("e.id").alias("id"),
            F.col("e.producer").alias("producer"),
            F.col("e.seq").alias("seq"),
            event_time.alias("event_time"),
            F.col("e.event_time_ms").alias("event_time_ms"),
            F.col("e.type").alias("event_type"),
            F.col("e.user_id").alias("user_id"),
            F.coalesce(F.col("e.amount"), F.lit(0.0)).alias("amount"),
            "topic",
            "partition",
            "offset",
            "cluster_id",
            "ingest_time",
            F.date_format(event_time, "yyyy-MM-dd").alias("dt"),
        )
    )


def dws(events: DataFrame) -> DataFrame:
    """DWD -> DWS: per minute of event time and event type: events, distinct users, amount."""
    return (
        events.groupBy(F.date_trunc("minute", "event_time").alias("minute"), "event_type")
        .agg(
            F.count(F.lit(1)).alias("events"),
            F.countDistinct("user_id").alias("users"),
            F.round(F.sum("amount"), 2).alias("amount"),
        )
        .orderBy("minute", "event_type")
    )


def audit(events: DataFrame, audit_rows: DataFrame, window_ms: int = AUDIT_WINDOW_MS) -> DataFrame:
    """DWD events + raw rows of the audit topic -> per (producer, topic, window): ``expected`` (audited),
    ``arrived`` (distinct ids) and ``missing = expected - arrived``; non-zero ``missing`` is loss (or, when
    negative, events no producer accounted for)."""
    audited = (
        audit_rows.select(F.from_json(F.col("value").cast("string"), AUDIT_SCHEMA).alias("a"))
        .select("a.*")
        .where(F.col("window_ms") == window_ms)
        .groupBy("producer", "topic", "window_start_ms")
        .agg(F.sum("count").alias("expected"))
    )
    arrived = (
        events.withColumn("window_start_ms", F.floor(F.col("event_time_ms") / window_ms) * window_ms)
        .groupBy("producer", "topic", F.col("window_start_ms").cast("long").alias("window_start_ms"))
        .agg(F.countDistinct("id").alias("arrived"))
    )
    keys = ["producer", "topic", "window_start_ms"]
    return (
        audited.join(arrived, keys, "full_outer")
        .select(
            *keys,
            F.timestamp_millis("window_start_ms").alias("window_start"),
            F.coalesce("expected", F.lit(0)).cast("long").alias("expected"),
            F.coalesce("arrived", F.lit(0)).cast("long").alias("arrived"),
        )
        .withColumn("missing", F.col("expected") - F.col("arrived"))
        .orderBy(*keys)
    )
