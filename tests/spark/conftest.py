"""One local[2] SparkSession for every Spark test, and a real federation per module for the source's tests.

The session carries Spark's own Kafka source (spark-sql-kafka-0-10, installed by ``make kafka``): the
oracle the kfed source is compared with. The federation (3 controllers, two Apache Kafka sub-clusters c1/c2
with their agents, U_TopicA with P0-P3 on c1 and P4-P7 on c2) is started on free loopback ports and stopped
by PID, like tests/integration's, at the end of the module that uses it. Its brokers are the session's
(``kafka_pool``, ``tests/conftest.py``), emptied when lent: Kafka's JVMs start once, not once per module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.launcher import LocalFederation, ready_demo_topic
from deploy.maven import SPARK_KAFKA_CONNECTOR

from ..conftest import KafkaPool

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


def connector_jars() -> str:
    """``spark.jars`` for Spark's Kafka source at the installed pyspark's version."""
    import pyspark

    version = SPARK_KAFKA_CONNECTOR.version()
    if pyspark.__version__ != version:
        raise RuntimeError(
            f"pyspark {pyspark.__version__} is installed but the Kafka connector is {version} "
            f"({SPARK_KAFKA_CONNECTOR.pom}): make them the same version"
        )
    return ",".join(str(jar) for jar in sorted(SPARK_KAFKA_CONNECTOR.installed().glob("*.jar")))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_pipeline import local_session

    session = local_session(
        "kfed-tests",
        "local[2]",
        **{
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.host": "127.0.0.1",
            "spark.jars": connector_jars(),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory, kafka_pool: KafkaPool) -> Iterator[LocalFederation]:
    with LocalFederation(tmp_path_factory.mktemp("fed"), lend_brokers=kafka_pool.source()) as federation:
        ready_demo_topic(federation)
        yield federation
