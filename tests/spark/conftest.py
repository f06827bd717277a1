"""One local[2] SparkSession for every Spark test, and one real federation for the source's tests.

The federation (3 controllers, two Tansu sub-clusters c1/c2 with their agents, U_TopicA with P0-P3 on c1
and P4-P7 on c2) is started on free loopback ports and stopped by PID, like tests/integration's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.local import LocalFederation, ready_demo_topic

os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark_pipeline import local_session

    session = local_session(
        "kfed-tests",
        "local[2]",
        **{"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2", "spark.driver.host": "127.0.0.1"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    federation = LocalFederation(tmp_path_factory.mktemp("fed"))
    try:
        federation.start()
        ready_demo_topic(federation)
        yield federation
    finally:
        federation.stop()
