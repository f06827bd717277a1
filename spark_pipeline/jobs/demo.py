"""Demo: produce demo events (and their audit records) to a logical topic, run every layer, print counts.

Meant for the federation of ``make run`` (``kfed local up``): ODS -> DWD -> DWS -> audit over U_TopicA.
"""

from __future__ import annotations

import sys
import time

from spark_pipeline.events import ensure_topic, produce_events

from . import audit, dwd_clean, dws_aggregate, ods_ingest
from .common import access, layer, parser, session, source_options


def main(argv: list[str] | None = None) -> int:
    p = parser("demo", __doc__.splitlines()[0] if __doc__ else "")
    p.add_argument("--produce", type=int, default=10_000, help="demo events to produce first (default 10000; 0: none)")
    p.add_argument("--producer-id", default="demo", help="producer id in the events and audit records")
    args = p.parse_args(argv)
    audit_topic = f"{args.topic}.audit"
    admin = access(args)
    ensure_topic(args.controllers, audit_topic, access=admin)
    if args.produce:  # seqs of successive runs must differ, or their ids would be deduplicated as resends
        first_seq = int(time.time()) * 1_000_000
        done = produce_events(
            args.controllers,
            args.topic,
            args.produce,
            producer_id=args.producer_id,
            first_seq=first_seq,
            audit_topic=audit_topic,
            resend_every=100,
            access=admin,
        )
        print(f"produced: {done.sent} messages ({done.distinct} distinct events, resends included) to {args.topic}")
    spark = session("kfed-demo", args.master, args.conf)
    ods_new = ods_ingest.run(spark, args.controllers, args.topic, args.warehouse, options=source_options(admin))
    ods_all = spark.read.parquet(layer(args.warehouse, "ods", args.topic)).count()
    print(f"ODS:   {ods_all} rows ({ods_new} ingested by this run)")
    print(f"DWD:   {dwd_clean.run(spark, args.topic, args.warehouse)} rows (parsed, deduplicated by id)")
    print(f"DWS:   {dws_aggregate.run(spark, args.topic, args.warehouse)} rows (per minute and event type)")
    diffs = audit.run(spark, args.controllers, args.topic, audit_topic, args.warehouse, source_options(admin))
    print(f"AUDIT: {len(diffs)} windows with a difference")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
