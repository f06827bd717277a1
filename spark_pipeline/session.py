"""A Spark session with the ``kfed`` source registered, and the shipping of kfed's code to a cluster's executors.

pyspark is imported inside the functions, when they are called: importing this module does not start a JVM.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path
from typing import Any, Final

ARROW_SPEED_ENV: Final = {"ARROW_ENABLE_UNSAFE_MEMORY_ACCESS": "true", "ARROW_ENABLE_NULL_CHECK_FOR_GET": "false"}
"""Arrow Java's switches for reading trusted batches: no bounds check on every buffer access, and no second
null check in ``get`` (Spark checks ``isNullAt`` itself). The JVM turns each batch the source's tasks
yield into rows, and these checks are a measurable part of that work. Off by default in Arrow, because a
malformed batch could then be read past its end. They apply to all
Arrow use in that JVM (pandas UDFs, ``mapInArrow``, ``toPandas``), whose batches pyarrow builds too; pyarrow
itself does not read them."""


def _submitted_conf() -> Any:
    """What spark-submit was given (``--master``, ``--conf``); empty under plain python.

    spark-submit starts the JVM first and hands Python its gateway (``PYSPARK_GATEWAY_PORT``); its settings are
    that JVM's system properties, which a ``SparkConf`` reads only once Python is connected to it."""
    from pyspark import SparkConf, SparkContext

    if os.environ.get("PYSPARK_GATEWAY_PORT"):
        SparkContext._ensure_initialized()
    return SparkConf()


def register(spark: Any) -> None:
    """Make ``spark.read.format("kfed")`` and ``spark.readStream.format("kfed")`` available in ``spark``.

    On a cluster (any master but ``local``/``local[N]``) this first ships kfed's code to the executors
    (``ship_code``): the registration carries the Python files the application has at that moment."""
    from .source import KfedDataSource

    ship_code(spark)
    spark.dataSource.register(KfedDataSource)


def ship_code(spark: Any) -> str | None:
    """Make the executors of ``spark`` import kfed from the archive of this code (``archive.py``), unless they
    share this process's Python (local mode) or spark-submit was given a kfed archive (``--py-files``).
    The archive's name, or None in local mode."""
    from .archive import build_archive, is_archive

    sc = spark.sparkContext
    master = sc.master
    if master == "local" or master.startswith("local["):
        return None
    submitted = sc.getConf().get("spark.submit.pyFiles", "") or ""
    shipped = [p for p in [*submitted.split(","), *sc._python_includes] if is_archive(p)]
    if shipped:
        name = str(shipped[0]).rsplit("/", 1)[-1]
    else:
        path = build_archive()
        sc.addPyFile(str(path))
        name = path.name
    _show_to_stream_readers(name)
    return name


def _show_to_stream_readers(name: str) -> None:
    """Put the archive ``name`` where the driver's Python process behind a stream reader looks for it.

    Spark 4.3 runs a Python stream reader's planning (``latestOffset``, ``partitions``) in a Python process on
    the driver, started with ``spark.pyspark.python``, which need not be a Python where kfed is installed. It
    is told to find the application's Python files in ``<SparkFiles root>/streaming_job/``
    (``PythonStreamingSourceRunner`` passes that fixed job directory) while Spark copies them to the root only.
    A hard link (else a copy) of the archive there lets it import kfed as every other Python of the application
    does."""
    from pyspark import SparkFiles

    root = Path(SparkFiles.getRootDirectory())
    source, target = root / name, root / "streaming_job" / name
    if not source.is_file() or target.exists():
        return
    target.parent.mkdir(exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def local_session(app_name: str = "kfed", master: str | None = None, **conf: str) -> Any:
    """A SparkSession with the ``kfed`` source registered.

    ``master`` defaults to ``local[2]`` unless one was given by ``spark-submit --master``. On loopback-only
    hosts Spark must be told its address, and its Python workers must run this interpreter (the one
    with pyarrow and confluent-kafka installed). ``ARROW_SPEED_ENV`` is set unless the environment
    already says otherwise, and passed to executors of a cluster master through ``spark.executorEnv``
    unless spark-submit's ``--conf`` set those."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    for name, value in ARROW_SPEED_ENV.items():  # read by the JVM this starts (driver, and local executors)
        os.environ.setdefault(name, value)
    builder = SparkSession.builder.appName(app_name)
    submitted = _submitted_conf()
    if master is not None:
        builder = builder.master(master)
    elif not submitted.contains("spark.master"):
        builder = builder.master("local[2]")
    if os.environ.get("SPARK_LOCAL_IP") == "127.0.0.1":
        builder = builder.config("spark.driver.host", "127.0.0.1")
    executor_env = {f"spark.executorEnv.{name}": os.environ[name] for name in ARROW_SPEED_ENV}
    defaults = {
        **{key: value for key, value in executor_env.items() if not submitted.contains(key)},  # --conf wins
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
