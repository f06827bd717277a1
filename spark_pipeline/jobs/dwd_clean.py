"""DWD clean: parse the ODS events, drop invalid ones, deduplicate by message id, type the columns.

Rebuilds the topic's DWD table from its whole ODS table (overwrite), partitioned by event date.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from spark_pipeline.transforms import dwd

from .common import layer, parser, session


def run(spark: Any, topic: str, warehouse: Path) -> int:
    """Rows in the DWD table."""
    out = layer(warehouse, "dwd", topic)
    dwd(spark.read.parquet(layer(warehouse, "ods", topic))).write.mode("overwrite").partitionBy("dt").parquet(out)
    return int(spark.read.parquet(out).count())


def main(argv: list[str] | None = None) -> int:
    args = parser("dwd_clean", __doc__.splitlines()[0] if __doc__ else "", kafka=False).parse_args(argv)
    rows = run(session("kfed-dwd_clean", args.master), args.topic, args.warehouse)
    print(f"dwd_clean: {rows} rows in {layer(args.warehouse, 'dwd', args.topic)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
