"""Audit: per producer and window, the counts in the audit topic against the distinct events that arrived.

Reads both logical topics from the clusters (a batch read up to their current ends), prints every window
whose difference is not zero, writes the whole report under the warehouse, and exits 1 when there is loss.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from metadata_log.access import access_from
from spark_pipeline.transforms import audit, dwd, ods

from .common import layer, parser, session, source_options


def read_topic(spark: Any, controllers: str, topic: str, options: Mapping[str, str]) -> Any:
    reader = spark.read.format("kfed").option("kfed.controllers", controllers).option("subscribe", topic)
    return reader.options(**options).load()


def run(
    spark: Any,
    controllers: str,
    topic: str,
    audit_topic: str,
    warehouse: Path | None,
    options: Mapping[str, str] | None = None,
) -> list[Any]:
    """The report rows with a non-zero difference (the whole report goes to ``warehouse``/audit/).
    ``options``: more ``kfed`` source options (e.g. ``common.source_options``)."""
    opts = options or {}
    events = dwd(ods(read_topic(spark, controllers, topic, opts)))
    report = audit(events, read_topic(spark, controllers, audit_topic, opts))
    report = report.cache()
    if warehouse is not None:
        report.write.mode("overwrite").parquet(layer(warehouse, "audit", topic))
    windows = report.count()
    diffs: list[Any] = report.where("missing != 0").collect()
    print(f"audit: {topic} against {audit_topic}: {windows} windows, {len(diffs)} with a difference")
    for r in diffs:
        kind = "LOSS" if r["missing"] > 0 else "SURPLUS"
        print(f"  {kind} producer={r['producer']} window={r['window_start']} expected={r['expected']} "
              f"arrived={r['arrived']} missing={r['missing']}")  # fmt: skip
    report.unpersist()
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = parser("audit", __doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--audit-topic", help="logical topic of the audit records (default: TOPIC.audit)")
    args = p.parse_args(argv)
    options = source_options(access_from(args))
    diffs = run(session("kfed-audit", args.master), args.controllers, args.topic,
                args.audit_topic or f"{args.topic}.audit", args.warehouse, options)  # fmt: skip
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
