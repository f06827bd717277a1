"""Audit: per producer and window, the counts in the audit topic against the distinct events that arrived.

Reads the audit topic from the clusters (a batch read up to its current end) and the events either from the
topic too (``--from topic``, the default: did the federation keep every event?) or from the warehouse's ODS
layer (``--from ods``: did the pipeline deliver every event?). Prints every window whose difference is not
zero, writes the whole report under the warehouse, and exits 1 when there is a difference.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from spark_pipeline.transforms import audit, dwd, ods

from .common import access, layer, parser, session, source_options


def read_topic(spark: Any, controllers: str, topic: str, options: Mapping[str, str]) -> Any:
    reader = spark.read.format("kfed").option("kfed.controllers", controllers).option("subscribe", topic)
    return reader.options(**options).load()


def run(
    spark: Any,
    controllers: str,
    topic: str,
    audit_topic: str,
    warehouse: str | Path | None,
    options: Mapping[str, str] | None = None,
    events_from: Literal["topic", "ods"] = "topic",
) -> list[Any]:
    """The report rows with a non-zero difference (the whole report goes to ``warehouse``/audit/).
    ``options``: more ``kfed`` source options (e.g. ``common.source_options``). ``events_from="ods"`` audits
    the ODS layer of ``warehouse`` instead of the topic."""
    opts = options or {}
    if events_from == "ods":
        if warehouse is None:
            raise ValueError("auditing the ODS layer needs the warehouse")
        ods_rows = spark.read.parquet(layer(warehouse, "ods", topic))
    else:
        ods_rows = ods(read_topic(spark, controllers, topic, opts))
    report = audit(dwd(ods_rows), read_topic(spark, controllers, audit_topic, opts))
    report = report.cache()
    if warehouse is not None:
        report.write.mode("overwrite").parquet(layer(warehouse, "audit", topic))
    windows = report.count()
    diffs: list[Any] = report.where("missing != 0").collect()
    what = topic if events_from == "topic" else f"{topic} (ODS layer)"
    print(f"audit: {what} against {audit_topic}: {windows} windows, {len(diffs)} with a difference")
    for r in diffs:
        kind = "LOSS" if r["missing"] > 0 else "SURPLUS"
        print(
            f"  {kind} producer={r['producer']} window={r['window_start']} expected={r['expected']} "
            f"arrived={r['arrived']} missing={r['missing']}"
        )
    report.unpersist()
    return diffs


def main(argv: list[str] | None = None) -> int:
    p = parser("audit", __doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--audit-topic", help="logical topic of the audit records (default: TOPIC.audit)")
    p.add_argument(
        "--from",
        dest="events_from",
        choices=("topic", "ods"),
        default="topic",
        help="audit the events in the topic (default) or those the warehouse's ODS layer holds",
    )
    args = p.parse_args(argv)
    options = source_options(access(args))
    diffs = run(
        session("kfed-audit", args.master, args.conf),
        args.controllers,
        args.topic,
        args.audit_topic or f"{args.topic}.audit",
        args.warehouse,
        options,
        args.events_from,
    )
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
