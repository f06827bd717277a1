"""DWD clean: parse the ODS events, drop invalid ones, deduplicate by message id, type the columns.

Rebuilds the topic's DWD table from its whole ODS table (overwrite), partitioned by event date.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from spark_pipeline.transforms import dwd

from .common import rebuild, rebuild_main


def run(spark: Any, topic: str, warehouse: str | Path) -> int:
    """Rows in the DWD table."""
    return rebuild(spark, dwd, warehouse, topic, "ods", "dwd", partition_by=("dt",))


def main(argv: list[str] | None = None) -> int:
    return rebuild_main("dwd_clean", __doc__, "dwd", run, argv)


if __name__ == "__main__":
    sys.exit(main())
