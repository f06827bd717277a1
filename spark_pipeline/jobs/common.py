"""What the jobs share: their command-line arguments, the warehouse layout and the Spark session."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from metadata_log.access import Access, add_access_arguments

DEFAULT_CONTROLLERS: Final = "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003"
DEFAULT_TOPIC: Final = "U_TopicA"
DEFAULT_WAREHOUSE: Final = "var/warehouse"


def parser(prog: str, description: str, *, kafka: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    if kafka:
        p.add_argument(
            "--controllers",
            default=os.environ.get("KFED_CONTROLLERS", DEFAULT_CONTROLLERS),
            help="controller URLs, comma-separated (default: $KFED_CONTROLLERS or those of `kfed local up`)",
        )
        add_access_arguments(p)
    p.add_argument("--topic", default=DEFAULT_TOPIC, help=f"logical topic of the events (default {DEFAULT_TOPIC})")
    p.add_argument(
        "--warehouse",
        type=Path,
        default=Path(DEFAULT_WAREHOUSE),
        help=f"root of the Parquet warehouse: ods/, dwd/, dws/, audit/ per topic (default {DEFAULT_WAREHOUSE})",
    )
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[2])")
    return p


def source_options(access: Access) -> dict[str, str]:
    """The ``kfed`` source options that carry ``access``: file paths, so no secret shows in a query plan."""
    options = {}
    if access.token_file:
        options["kfed.token.file"] = access.token_file
    if access.ca_file:
        options["kfed.ssl.ca.location"] = access.ca_file
    return options


def layer(warehouse: Path, name: str, topic: str) -> str:
    """Where one layer of one topic lives (Spark wants string paths)."""
    return str(warehouse.resolve() / name / topic)


def session(app: str, master: str | None) -> Any:
    from spark_pipeline import local_session

    return local_session(app, master)


def rebuild(
    spark: Any,
    transform: Callable[[Any], Any],
    warehouse: Path,
    topic: str,
    source: str,
    target: str,
    partition_by: Sequence[str] = (),
) -> int:
    """Overwrite the ``target`` layer of ``topic`` with ``transform`` of its whole ``source`` layer; its rows."""
    out = layer(warehouse, target, topic)
    writer = transform(spark.read.parquet(layer(warehouse, source, topic))).write.mode("overwrite")
    if partition_by:
        writer = writer.partitionBy(*partition_by)
    writer.parquet(out)
    return int(spark.read.parquet(out).count())


def rebuild_main(
    job: str, doc: str | None, target: str, run: Callable[[Any, str, Path], int], argv: list[str] | None
) -> int:
    """``main`` of a job that rebuilds one layer from the one below (no Kafka): parse, run, print."""
    args = parser(job, doc.splitlines()[0] if doc else "", kafka=False).parse_args(argv)
    rows = run(session(f"kfed-{job}", args.master), args.topic, args.warehouse)
    print(f"{job}: {rows} rows in {layer(args.warehouse, target, args.topic)}")
    return 0
