"""DWS aggregate: per minute of event time and event type, events, distinct users and amount.

Rebuilds the topic's DWS table from its DWD table (overwrite).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from spark_pipeline.transforms import dws

from .common import layer, parser, session


def run(spark: Any, topic: str, warehouse: Path) -> int:
    """Rows in the DWS table."""
    out = layer(warehouse, "dws", topic)
    dws(spark.read.parquet(layer(warehouse, "dwd", topic))).write.mode("overwrite").parquet(out)
    return int(spark.read.parquet(out).count())


def main(argv: list[str] | None = None) -> int:
    args = parser("dws_aggregate", __doc__.splitlines()[0] if __doc__ else "", kafka=False).parse_args(argv)
    rows = run(session("kfed-dws_aggregate", args.master), args.topic, args.warehouse)
    print(f"dws_aggregate: {rows} rows in {layer(args.warehouse, 'dws', args.topic)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
