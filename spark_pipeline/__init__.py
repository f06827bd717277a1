"""kfed on Spark: the ``kfed`` Python Data Source and the warehouse jobs (ODS -> DWD -> DWS, audit).

Importing this package does not import pyspark (the controller's CLI imports ``spark_pipeline.cli``):
``register`` and ``local_session`` import it when called.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def register(spark: Any) -> None:
    """Make ``spark.read.format("kfed")`` and ``spark.readStream.format("kfed")`` available in ``spark``."""
    from .source import KfedDataSource

    spark.dataSource.register(KfedDataSource)


def local_session(app_name: str = "kfed", master: str | None = None, **conf: str) -> Any:
    """A SparkSession with the ``kfed`` source registered.

    ``master`` defaults to ``local[2]`` unless one was given by ``spark-submit --master``. On loopback-only
    hosts Spark must be told its address, and its Python workers must run this interpreter (the one
    with pyarrow and confluent-kafka installed).
    """
    from pyspark import SparkConf
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):  # spark-submit --master sets it; plain python does not
        builder = builder.master("local[2]")
    if os.environ.get("SPARK_LOCAL_IP") == "127.0.0.1":
        builder = builder.config("spark.driver.host", "127.0.0.1")
    defaults = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": "4",
    }
    for key, value in {**defaults, **conf}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark
