"""ODS ingest: the raw events of a logical topic into Parquet partitioned by arrival date and hour.

Incremental: a streaming query with ``Trigger.AvailableNow`` and a checkpoint under the warehouse, so each
run reads what arrived since the last one, exactly once, and stops.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metadata_log.access import access_from
from spark_pipeline.transforms import ods

from .common import layer, parser, session, source_options


def run(
    spark: Any,
    controllers: str,
    topic: str,
    warehouse: Path,
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
) -> int:
    """Rows ingested by this run. ``options``: more ``kfed`` source options (e.g. ``common.source_options``)."""
    reader = (
        spark.readStream.format("kfed")
        .option("kfed.controllers", controllers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .options(**(options or {}))
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    query = (
        ods(reader.load())
        .writeStream.format("parquet")
        .option("path", layer(warehouse, "ods", topic))
        .option("checkpointLocation", layer(warehouse, "_checkpoints/ods", topic))
        .partitionBy("dt", "hour")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


def main(argv: list[str] | None = None) -> int:
    p = parser("ods_ingest", __doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--max-offsets-per-trigger", type=int, help="cap each micro-batch (default: no cap)")
    args = p.parse_args(argv)
    spark = session("kfed-ods_ingest", args.master)
    rows = run(spark, args.controllers, args.topic, args.warehouse, args.max_offsets_per_trigger,
               source_options(access_from(args)))  # fmt: skip
    print(f"ods_ingest: {rows} rows from {args.topic} into {layer(args.warehouse, 'ods', args.topic)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
