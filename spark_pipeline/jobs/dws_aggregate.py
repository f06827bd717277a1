"""DWS aggregate: per minute of event time and event type, events, distinct users and amount.

Rebuilds the topic's DWS table from its DWD table (overwrite).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from spark_pipeline.transforms import dws

from .common import rebuild, rebuild_main


def run(spark: Any, topic: str, warehouse: str | Path) -> int:
    """Rows in the DWS table."""
    return rebuild(spark, dws, warehouse, topic, "dwd", "dws")


def main(argv: list[str] | None = None) -> int:
    return rebuild_main("dws_aggregate", __doc__, "dws", run, argv)


if __name__ == "__main__":
    sys.exit(main())
