"""What the jobs share: their command-line arguments, the warehouse layout and the Spark session.

The warehouse (Parquet layers and the streaming checkpoints under it) is the one place the jobs write, and
the driver and every executor must see it at the same path: on one machine any local directory; on a
cluster a shared mount at the same path on every node, or a Hadoop URI (``hdfs://…``, ``s3a://…`` with its
connector on the classpath). A URI is used as given; a plain path is made absolute on the driver.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from metadata_client.access import Access, access_from, add_access_arguments

DEFAULT_CONTROLLERS: Final = "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003"
DEFAULT_TOPIC: Final = "U_TopicA"
DEFAULT_WAREHOUSE: Final = "var/warehouse"


def parser(prog: str, description: str, *, kafka: bool = True, layers: bool = True) -> argparse.ArgumentParser:
    """The options every job takes: the controllers (``kafka``), the topic and warehouse (``layers``), Spark's."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    if kafka:
        p.add_argument(
            "--controllers",
            default=os.environ.get("KFED_CONTROLLERS", DEFAULT_CONTROLLERS),
            help="controller URLs, comma-separated (default: $KFED_CONTROLLERS or those of `kfed local up`)",
        )
        add_access_arguments(p)
    if layers:
        p.add_argument("--topic", default=DEFAULT_TOPIC, help=f"logical topic of the events (default {DEFAULT_TOPIC})")
        p.add_argument(
            "--warehouse",
            default=DEFAULT_WAREHOUSE,
            help="root of the Parquet warehouse: ods/, dwd/, dws/, audit/ per topic, and the streaming checkpoints "
            f"(default {DEFAULT_WAREHOUSE}); on a cluster a path every node shares, or hdfs://..., s3a://...",
        )
    p.add_argument(
        "--master", help="Spark master, e.g. spark://127.0.0.1:7077 (default: spark-submit's, else local[2])"
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        type=spark_conf,
        metavar="KEY=VALUE",
        help="a Spark setting, repeatable (e.g. --conf spark.executor.memory=512m)",
    )
    return p


def spark_conf(text: str) -> tuple[str, str]:
    """``KEY=VALUE`` of ``--conf``, KEY a Spark setting name."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip().startswith("spark."):
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE with a spark.* key")
    return key.strip(), value


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def warehouse_root(warehouse: str | Path) -> str:
    """The warehouse as Spark should see it: a URI as given, a plain path made absolute."""
    text = str(warehouse)
    return text.rstrip("/") if _URI.match(text) else str(Path(text).resolve())


def access(args: argparse.Namespace) -> Access:
    """The token and CA the job's ``--token-file``/``--tls-ca`` (or their defaults) give."""
    return access_from(args)


def source_options(access: Access) -> dict[str, str]:
    """The ``kfed`` source options that carry ``access``: file paths, so no secret shows in a query plan."""
    options = {}
    if access.token_file:
        options["kfed.token.file"] = access.token_file
    if access.ca_file:
        options["kfed.ssl.ca.location"] = access.ca_file
    return options


def layer(warehouse: str | Path, name: str, topic: str) -> str:
    """Where one layer of one topic lives (Spark wants string paths)."""
    return f"{warehouse_root(warehouse)}/{name}/{topic}"


def session(app: str, master: str | None, conf: Sequence[tuple[str, str]] = ()) -> Any:
    """The job's SparkSession; on a cluster, says which application it is (stderr), to find it in the master's UI."""
    from spark_pipeline import local_session

    spark = local_session(app, master, **dict(conf))
    sc = spark.sparkContext
    if not sc.master.startswith("local"):
        print(f"{app}: Spark application {sc.applicationId} on {sc.master}", file=sys.stderr, flush=True)
    return spark


def rebuild(
    spark: Any,
    transform: Callable[[Any], Any],
    warehouse: str | Path,
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
    job: str, doc: str | None, target: str, run: Callable[[Any, str, str], int], argv: list[str] | None
) -> int:
    """``main`` of a job that rebuilds one layer from the one below (no Kafka): parse, run, print."""
    args = parser(job, doc.splitlines()[0] if doc else "", kafka=False).parse_args(argv)
    rows = run(session(f"kfed-{job}", args.master, args.conf), args.topic, args.warehouse)
    print(f"{job}: {rows} rows in {layer(args.warehouse, target, args.topic)}")
    return 0
