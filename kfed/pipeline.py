"""``kfed pipeline NAME``: run one warehouse job. Importing this module does not import pyspark."""

from __future__ import annotations

import argparse
import importlib

from spark_pipeline.jobs import JOBS

_EPILOG = """\
jobs (each also runs as `python -m spark_pipeline.jobs.NAME`; `kfed pipeline NAME --help` for its options):
  ods_ingest     a logical topic's raw events into Parquet by arrival date/hour (incremental, AvailableNow)
  dwd_clean      ODS -> DWD: parse the JSON events, drop invalid ones, deduplicate by message id
  dws_aggregate  DWD -> DWS: per-minute aggregates by event type
  audit          per-producer, per-window counts of the audit topic vs what arrived; exit 1 on loss
  demo           produce demo events to the topic, then run all of the above and print row counts

Spark runs locally (local[2]) unless started by spark-submit --master ...; the jobs read the topic's
partitions from the physical clusters named by the metadata log (the `kfed` Spark source).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed pipeline`` parser."""
    parser.description = "Run one PySpark job of the kfed warehouse pipeline."
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("job", choices=JOBS, metavar="NAME", help=f"one of: {', '.join(JOBS)}")
    parser.add_argument("job_args", nargs=argparse.REMAINDER, help="the job's own options (see NAME --help)")


def run(args: argparse.Namespace) -> int:
    """Run the job with its own options (its module is imported only now: it imports pyspark)."""
    module = importlib.import_module(f"spark_pipeline.jobs.{args.job}")
    return int(module.main(list(args.job_args)))
