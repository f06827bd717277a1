"""Spark's replay across a federation change: an ODS micro-batch crashes half-way; while the job is down the
federation shrinks (a partition goes read-only), scales up (a third sub-cluster, partitions on it) and
starts decommissioning a sub-cluster; the real ODS job restarts from its checkpoint. ODS must then hold
every produced message exactly once.

The federation is this test's own (the source's tests share theirs, and a decommission would change it).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.launcher import LocalFederation
from kfed.cli import main as kfed
from sdk import FederatedProducer
from spark_pipeline.events import ensure_topic
from spark_pipeline.jobs import ods_ingest
from spark_pipeline.jobs.common import layer
from spark_pipeline.transforms import ods

from ..conftest import KafkaPool

pytestmark = pytest.mark.slow

TOPIC = "T_replay"
CRASH_FROM = 700  # the crashing run fails on the first value a<N> with N >= this: in its second micro-batch


@pytest.fixture
def fed(tmp_path: Path, kafka_pool: KafkaPool) -> Iterator[LocalFederation]:
    """Its own quorum and agents; the session's Kafka brokers (c3 too, when the test adds it), emptied when lent."""
    with LocalFederation(tmp_path / "fed", lend_brokers=kafka_pool.source()) as federation:
        federation.wait_clusters_healthy(timeout_s=40)
        yield federation


def controllers(fed: LocalFederation) -> str:
    return ",".join(fed.quorum.urls)


def produce(fed: LocalFederation, values: list[str]) -> dict[str, int]:
    """Each value once, key-less; value -> logical partition. Every delivery must succeed."""
    landed: dict[str, int] = {}
    failed: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            landed[msg.value().decode()] = msg.partition()
        else:
            failed.append(err)

    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": report}) as p:
        for v in values:
            p.produce(TOPIC, value=v.encode())
        assert p.flush(60) == 0
    assert not failed and len(landed) == len(values)
    return landed


def crash_once(marker: Path) -> Any:
    """A filter that keeps every row, but fails its task on the first value at or past ``CRASH_FROM`` (once:
    ``marker`` remembers it crashed, across the Python workers)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import BooleanType

    def keep(value):  # type: ignore[no-untyped-def]  # untyped: with hints pyspark tries to infer a pandas UDF
        if value.startswith("a") and int(value[1:]) >= CRASH_FROM and not marker.exists():
            marker.touch()
            raise RuntimeError(f"crash mid-batch at {value}")
        return True

    return F.udf(keep, BooleanType())


@pytest.mark.timeout(1800)  # its own federation, a third sub-cluster and three Spark queries
def test_the_ods_job_replays_a_crashed_batch_across_a_read_only_partition_scale_up_and_draining_exactly_once(
    spark: Any, fed: LocalFederation, tmp_path: Path
) -> None:
    warehouse = tmp_path / "warehouse"
    ensure_topic(controllers(fed), TOPIC, partitions_per_cluster=2, access=fed.quorum.access)  # P0-1 c1, P2-3 c2
    first = [f"a{i}" for i in range(1200)]
    produce(fed, first)

    # The ODS job's own query, with a filter that fails its second micro-batch half-way.
    reader = (
        spark.readStream.format("kfed")
        .option("kfed.controllers", controllers(fed))
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
    )
    rows = ods(reader.load())
    for attempt in range(3):
        crashing = (
            rows.where(crash_once(tmp_path / "crashed")("value"))
            .writeStream.format("parquet")
            .option("path", layer(warehouse, "ods", TOPIC))
            .option("checkpointLocation", layer(warehouse, "_checkpoints/ods", TOPIC))
            .partitionBy("dt", "hour")
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match=r"crash mid-batch|Python worker failed to connect back") as ended:
            crashing.awaitTermination(120)
        # Spark gives the source's Python worker a fixed 10 s to start (not configurable): under load it may
        # not, before any batch ran. The query is started again from its checkpoint, as an operator would.
        if "crash mid-batch" in str(ended.value) or attempt == 2:
            break
    assert "crash mid-batch" in str(ended.value)
    committed = spark.read.parquet(layer(warehouse, "ods", TOPIC)).count()
    assert 0 < committed < len(first), f"the crash left {committed} rows committed: not mid-way"

    # While the job is down: shrink, scale up, decommission.
    with fed.quorum.controller_client() as client:
        client.put(f"/v1/topics/{TOPIC}/partitions/3/state", {"state": "read_only"})
        fed.add_cluster("c3", "r1")
        fed.wait_clusters_healthy(["c3"], timeout_s=30)
        added = client.post(f"/v1/topics/{TOPIC}/partitions", {"cluster_id": "c3", "count": 2})
    fed.wait_writable(TOPIC, min_offset=added["offset"])
    second = [f"b{i}" for i in range(900)]
    landed = produce(fed, second)
    assert {4, 5} <= set(landed.values()) and 3 not in landed.values()
    # No group reads this topic, so c2 stays draining, its data readable (never drained on its own).
    assert kfed(["cluster", "decommission", "c2", "--timeout-s", "3", "--controller", controllers(fed),
                 *fed.quorum.token_args]) == 3  # fmt: skip
    third = [f"c{i}" for i in range(600)]
    assert set(produce(fed, third).values()) <= {0, 1, 4, 5}, "c2 no longer takes writes"

    # The real ODS job restarts from the checkpoint: the crashed batch first, with exactly its offsets.
    ods_ingest.run(spark, controllers(fed), TOPIC, warehouse)
    ods_rows = spark.read.parquet(layer(warehouse, "ods", TOPIC)).select("value", "partition", "cluster_id").collect()
    counts = Counter(r["value"] for r in ods_rows)
    doubles = {v: n for v, n in counts.items() if n > 1}
    assert not doubles, f"{len(doubles)} messages twice in ODS, e.g. {sorted(doubles.items())[:5]}"
    missing = set(first + second + third) - set(counts)
    assert not missing, f"{len(missing)} messages missing from ODS, e.g. {sorted(missing)[:5]}"
    assert len(ods_rows) == len(first) + len(second) + len(third)
    assert {r["cluster_id"] for r in ods_rows} == {"c1", "c2", "c3"}
