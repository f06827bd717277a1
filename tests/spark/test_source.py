"""The kfed Spark source and the jobs on a real federation: 3 controllers, Apache Kafka sub-clusters, agents.

Every test but the first uses its own topic, so counts are exact; the scale-up test adds a third
sub-cluster to the region and runs last.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from deploy.launcher import LocalFederation
from sdk import FederatedProducer
from spark_pipeline.events import ensure_topic, produce_events
from spark_pipeline.jobs import audit as audit_job
from spark_pipeline.jobs import ods_ingest

pytestmark = pytest.mark.slow


def controllers(fed: LocalFederation) -> str:
    return ",".join(fed.quorum.urls)


def produce(fed: LocalFederation, topic: str, values: list[str], headers_every: int = 0) -> dict[str, int]:
    """Send each value once; returns value -> logical partition, as the delivery reports say."""
    landed: dict[str, int] = {}
    failed: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is None:
            landed[msg.value().decode()] = msg.partition()
        else:
            failed.append(err)

    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": report}) as p:
        for i, v in enumerate(values):
            headers = [("n", str(i).encode())] if headers_every and i % headers_every == 0 else None
            p.produce(topic, value=v.encode(), key=f"k{i % 97}".encode() if i % 3 else None, headers=headers)
            if i % 2000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
    assert not failed and len(landed) == len(values)
    return landed


def read(spark: Any, fed: LocalFederation, topic: str, **options: str) -> Any:
    reader = spark.read.format("kfed").option("kfed.controllers", controllers(fed)).option("subscribe", topic)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def digest(values: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(values)).encode()).hexdigest()


def test_batch_read_of_the_demo_topic_returns_exactly_the_produced_messages(spark: Any, fed: LocalFederation) -> None:
    values = [f"m-{i}" for i in range(20_000)]
    landed = produce(fed, "U_TopicA", values, headers_every=10)
    df = read(spark, fed, "U_TopicA", includeHeaders="true", **{"kfed.maxOffsetsPerTask": "1500"})
    assert df.rdd.getNumPartitions() >= 16, "ranges over 1500 offsets are split"
    rows = df.select("value", "topic", "partition", "offset", "cluster_id", "headers", "timestampType").collect()
    got = [r["value"].decode() for r in rows]
    assert len(got) == len(values)
    assert digest(got) == digest(values)
    assert {r["value"].decode(): r["partition"] for r in rows} == landed
    assert len({(r["partition"], r["offset"]) for r in rows}) == len(rows)
    assert {(r["partition"], r["cluster_id"]) for r in rows} == {(p, "c1" if p < 4 else "c2") for p in range(8)}
    assert {r["topic"] for r in rows} == {"U_TopicA"} and {r["timestampType"] for r in rows} == {0}
    with_headers = [r for r in rows if r["headers"]]
    assert len(with_headers) == len(values) // 10
    assert all(json.loads(r["headers"][0]["value"]) == int(r["value"][2:]) for r in with_headers)


def test_the_local_session_turns_arrow_batches_into_rows_without_per_access_checks(spark: Any) -> None:
    """``ARROW_SPEED_ENV`` reached the JVM: Arrow Java read its switches when its classes loaded."""
    jvm = spark.sparkContext._jvm
    assert jvm.org.apache.arrow.memory.BoundsChecking.BOUNDS_CHECKING_ENABLED is False
    assert jvm.org.apache.arrow.vector.NullCheckingForGet.NULL_CHECKING_ENABLED is False


def test_metadata_offset_pins_the_partition_set(spark: Any, fed: LocalFederation) -> None:
    topic = "T_pin"
    ensure_topic(controllers(fed), topic, access=fed.quorum.access)  # one partition per cluster: P0 on c1, P1 on c2
    pinned = int(fed.metadata()["offset"])
    with fed.quorum.controller_client() as client:
        added = client.post(
            f"/v1/topics/{topic}/partitions", {"cluster_id": "c1", "count": 1, "physical_topic": "T_pin_b"}
        )
    fed.wait_writable(topic, min_offset=added["offset"])
    landed = produce(fed, topic, [f"v{i}" for i in range(600)])
    assert set(landed.values()) == {0, 1, 2}

    then = read(spark, fed, topic, metadataOffset=str(pinned)).select("value", "partition").collect()
    assert {r["partition"] for r in then} == {0, 1}
    assert sorted(r["value"].decode() for r in then) == sorted(v for v, p in landed.items() if p < 2)
    now = read(spark, fed, topic).select("partition").collect()
    assert len(now) == 600 and {r["partition"] for r in now} == {0, 1, 2}

    with pytest.raises(Exception, match="metadataOffset") as e:
        read(spark, fed, topic, metadataOffset="999999999").count()
    assert "high watermark" in str(e.value)
    with pytest.raises(Exception, match="startingOffsets"):
        read(spark, fed, topic, startingOffsets='{"T_pin": {"9": 0}}').count()


def test_available_now_runs_over_growing_data_read_every_record_once(
    spark: Any, fed: LocalFederation, tmp_path: Path
) -> None:
    topic = "T_grow"
    ensure_topic(controllers(fed), topic, partitions_per_cluster=2, access=fed.quorum.access)
    produce(fed, topic, [f"a{i}" for i in range(3000)])
    first = ods_ingest.run(spark, controllers(fed), topic, tmp_path, max_offsets_per_trigger=1000)
    assert first == 3000
    produce(fed, topic, [f"b{i}" for i in range(2000)])
    assert ods_ingest.run(spark, controllers(fed), topic, tmp_path) == 2000
    assert ods_ingest.run(spark, controllers(fed), topic, tmp_path) == 0
    rows = spark.read.parquet(str(tmp_path / "ods" / topic)).select("value", "partition", "offset").collect()
    values = [r["value"] for r in rows]
    assert len(values) == 5000 and len(set(values)) == 5000
    assert digest(values) == digest([f"a{i}" for i in range(3000)] + [f"b{i}" for i in range(2000)])


class Sink:
    """foreachBatch sink: keeps every batch's rows; can fail once after seeing a batch (a crash mid-batch)."""

    def __init__(self, fail_on_batch: int | None = None) -> None:
        self.batches: list[tuple[int, list[tuple[int, int, str]]]] = []
        self.fail_on_batch = fail_on_batch

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = sorted((r["partition"], r["offset"], r["value"].decode()) for r in df.collect())
        self.batches.append((batch_id, rows))
        if batch_id == self.fail_on_batch:
            raise RuntimeError(f"crash in batch {batch_id}")


def stream(spark: Any, fed: LocalFederation, topic: str, sink: Sink, checkpoint: Path, **options: str) -> Any:
    reader = (
        spark.readStream.format("kfed")
        .option("kfed.controllers", controllers(fed))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def test_a_crash_mid_batch_replays_the_same_offsets(spark: Any, fed: LocalFederation, tmp_path: Path) -> None:
    topic = "T_crash"
    ensure_topic(controllers(fed), topic, access=fed.quorum.access)
    produce(fed, topic, [f"a{i}" for i in range(1000)])
    crashing = Sink(fail_on_batch=1)
    query = stream(spark, fed, topic, crashing, tmp_path / "ckpt", maxOffsetsPerTrigger="400")
    with pytest.raises(Exception, match="crash in batch 1"):
        query.awaitTermination(60)
    assert [b for b, _ in crashing.batches] == [0, 1]
    crashed_rows = crashing.batches[1][1]
    assert len(crashed_rows) == 400
    produce(fed, topic, [f"b{i}" for i in range(500)])  # the federation moves on before the restart

    healthy = Sink()
    query = stream(spark, fed, topic, healthy, tmp_path / "ckpt", maxOffsetsPerTrigger="400")
    query.awaitTermination(60)
    assert healthy.batches[0] == (1, crashed_rows), "the failed batch is replayed with exactly its offsets"
    everything = crashing.batches[0][1] + [row for _, rows in healthy.batches for row in rows]
    values = [v for _, _, v in everything]
    assert len(values) == 1500 and len(set(values)) == 1500


def test_the_audit_job_finds_a_dropped_message_and_no_loss_otherwise(spark: Any, fed: LocalFederation) -> None:
    topic, audit_topic = "T_audit", "T_audit.audit"
    ensure_topic(controllers(fed), topic, access=fed.quorum.access)
    ensure_topic(controllers(fed), audit_topic, access=fed.quorum.access)
    start_ms = 1_800_000_000_000
    produce_events(controllers(fed), topic, 1500, producer_id="clean", start_ms=start_ms, span_ms=180_000,
                   audit_topic=audit_topic, resend_every=50)  # fmt: skip
    assert audit_job.run(spark, controllers(fed), topic, audit_topic, None) == []
    produce_events(controllers(fed), topic, 500, producer_id="lossy", start_ms=start_ms, span_ms=180_000,
                   audit_topic=audit_topic, drop={217})  # fmt: skip
    diffs = audit_job.run(spark, controllers(fed), topic, audit_topic, None)
    window = (start_ms + 217 * 180_000 // 500) // 60_000 * 60_000
    assert [(r["producer"], r["window_start_ms"], r["missing"]) for r in diffs] == [("lossy", window, 1)]


def test_a_partition_added_by_scale_up_is_read_by_the_next_run(
    spark: Any, fed: LocalFederation, tmp_path: Path
) -> None:
    topic = "T_scale"
    ensure_topic(controllers(fed), topic, access=fed.quorum.access)
    produce(fed, topic, [f"a{i}" for i in range(500)])
    first = Sink()
    stream(spark, fed, topic, first, tmp_path / "ckpt").awaitTermination(60)
    fed.add_cluster("c3", "r1")
    fed.wait_clusters_healthy(["c3"], timeout_s=30)
    with fed.quorum.controller_client() as client:
        added = client.post(f"/v1/topics/{topic}/partitions", {"cluster_id": "c3", "count": 2})
    fed.wait_writable(topic, min_offset=added["offset"])
    landed = produce(fed, topic, [f"b{i}" for i in range(900)])
    assert {2, 3} <= set(landed.values())
    second = Sink()
    stream(spark, fed, topic, second, tmp_path / "ckpt").awaitTermination(60)
    before = [v for _, rows in first.batches for _, _, v in rows]
    after = [(p, v) for _, rows in second.batches for p, _, v in rows]
    assert sorted(before) == sorted(f"a{i}" for i in range(500))
    assert sorted(v for _, v in after) == sorted(landed)
    assert {p for p, _ in after} == {0, 1, 2, 3}
