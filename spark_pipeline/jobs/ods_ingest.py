"""ODS ingest: the raw events of a logical topic into Parquet partitioned by arrival date and hour.

Incremental and exactly once: a streaming query with its checkpoint under the warehouse
(``_checkpoints/ods/TOPIC``). By default it runs with ``Trigger.AvailableNow``: each run reads what arrived
since the last one, then stops. With ``--trigger-interval 10s`` it keeps running, one micro-batch every 10 s,
until SIGTERM or SIGINT, which stop the query and the application cleanly.

A run killed at any point (kill -9 of the driver, lost executors or workers) neither loses nor repeats a
message. A restart re-runs the micro-batch that was in flight with the offsets the checkpoint logged for it
(each carries the physical mapping it was planned with). The Parquet sink keeps its own log (``_spark_metadata``)
of the files of committed micro-batches: Spark's readers of the ODS directory see those and no file of an
interrupted attempt.
"""

from __future__ import annotations

import argparse
import re
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from spark_pipeline.transforms import ods

from .common import access, layer, parser, session, source_options

POLL_S: Final = 0.5
"""How often a long-running ingest checks for a stop signal and prints new progress."""
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNIT_S: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def trigger_interval(text: str) -> float:
    """``--trigger-interval``: ``10s``, ``500ms``, ``2m``, ``1h`` or plain seconds; more than 0."""
    match = _DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 10s, 500ms, 2m")
    seconds = float(match.group(1)) * _UNIT_S[match.group(2) or "s"]
    if seconds <= 0:
        raise argparse.ArgumentTypeError("must be more than 0 (each micro-batch asks the controllers and brokers)")
    return seconds


def start(
    spark: Any,
    controllers: str,
    topic: str,
    warehouse: str | Path,
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
    interval_s: float | None = None,
) -> Any:
    """Start the ingest query: ``Trigger.AvailableNow``, or a micro-batch every ``interval_s`` seconds."""
    reader = (
        spark.readStream.format("kfed")
        .option("kfed.controllers", controllers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .options(**(options or {}))
    )
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    writer = (
        ods(reader.load())
        .writeStream.format("parquet")
        .queryName(f"ods_ingest {topic}")
        .option("path", layer(warehouse, "ods", topic))
        .option("checkpointLocation", layer(warehouse, "_checkpoints/ods", topic))
        .partitionBy("dt", "hour")
    )
    if interval_s is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{round(interval_s * 1000)} milliseconds")
    return writer.start()


def run(
    spark: Any,
    controllers: str,
    topic: str,
    warehouse: str | Path,
    max_offsets_per_trigger: int | None = None,
    options: Mapping[str, str] | None = None,
) -> int:
    """One AvailableNow run; the rows it ingested. ``options``: more ``kfed`` source options
    (e.g. ``common.source_options``)."""
    query = start(spark, controllers, topic, warehouse, max_offsets_per_trigger, options)
    query.awaitTermination()
    return sum(int(p["numInputRows"]) for p in query.recentProgress)


class Progress:
    """The micro-batches a query has committed rows in, each counted once (Spark keeps only its last
    progress reports, so they are read as they come)."""

    def __init__(self) -> None:
        self.last_batch = -1
        self.rows = 0

    def update(self, query: Any, say: Any = print) -> None:
        for p in query.recentProgress:
            rows = int(p["numInputRows"])
            if p["batchId"] > self.last_batch and rows:
                self.last_batch = p["batchId"]
                self.rows += rows
                say(f"ods_ingest: batch {p['batchId']}: {rows} rows ({self.rows} since start)", flush=True)


def run_until_stopped(query: Any, stop: threading.Event) -> int:
    """Keep ``query`` running until ``stop`` is set, then stop it; the rows ingested meanwhile. A query that
    fails on its own raises (``StreamingQueryException``)."""
    progress = Progress()
    while not stop.is_set():
        if query.awaitTermination(POLL_S):
            query.awaitTermination()  # it ended by itself: raises its error
            break
        progress.update(query)
    query.stop()  # interrupts the micro-batch in flight: the next run redoes it from the checkpoint
    progress.update(query)
    return progress.rows


def main(argv: list[str] | None = None) -> int:
    p = parser("ods_ingest", __doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--max-offsets-per-trigger", type=int, help="cap each micro-batch (default: no cap)")
    p.add_argument(
        "--trigger-interval",
        type=trigger_interval,
        metavar="DURATION",
        help="keep ingesting, a micro-batch every DURATION (10s, 500ms, 2m), until SIGTERM/SIGINT "
        "(default: read what has arrived, then stop)",
    )
    args = p.parse_args(argv)
    spark = session("kfed-ods_ingest", args.master, args.conf)
    options = source_options(access(args))
    target = layer(args.warehouse, "ods", args.topic)
    if args.trigger_interval is None:
        rows = run(spark, args.controllers, args.topic, args.warehouse, args.max_offsets_per_trigger, options)
        print(f"ods_ingest: {rows} rows from {args.topic} into {target}")
        return 0
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # after the session: PySpark sets its own SIGINT handler
        signal.signal(signum, lambda *_: stop.set())
    query = start(
        spark,
        args.controllers,
        args.topic,
        args.warehouse,
        args.max_offsets_per_trigger,
        options,
        args.trigger_interval,
    )
    print(
        f"ods_ingest: {args.topic} into {target}, a micro-batch every {args.trigger_interval:g} s; "
        "SIGTERM or Ctrl-C stops",
        flush=True,
    )
    try:
        rows = run_until_stopped(query, stop)
    except Exception as e:  # the query failed: its checkpoint lets a restart go on from its last batch
        print(
            f"ods_ingest: the query failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr
        )
        return 1
    finally:
        spark.stop()
    print(f"ods_ingest: stopped; {rows} rows from {args.topic} into {target} since start", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
