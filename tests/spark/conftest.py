"""One local[2] SparkSession for every Spark test, and one real federation for the source's tests.

The federation (3 controllers, two Tansu sub-clusters c1/c2 with their agents, U_TopicA with P0-P3 on c1
and P4-P7 on c2) is started on free loopback ports and stopped by PID, like tests/integration's.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

from deploy.local import LocalFederation, create_demo_topic

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


def wait_writable(federation: LocalFederation, topic: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        parts = federation.metadata(topic=topic)["topics"][0]["partitions"]
        if all(p["writable"] and p["leader"] for p in parts if p["state"] == "writable"):
            return
        assert time.monotonic() < deadline, f"{topic} never became writable everywhere: {parts}"
        time.sleep(0.1)


@pytest.fixture(scope="session")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    federation = LocalFederation(tmp_path_factory.mktemp("fed"))
    try:
        federation.start()
        federation.wait_clusters_healthy(timeout_s=40)
        create_demo_topic(federation)
        wait_writable(federation, "U_TopicA")
        yield federation
    finally:
        federation.stop()
