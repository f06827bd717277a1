"""Data-plane durability on Apache Kafka sub-clusters, and Spark's own Kafka source as the kfed source's oracle.

One federation for the module: c1 and c2 in r1 with 3 brokers each (every physical topic replicated 3 times,
``min.insync.replicas=2``, acks=all), and c3 in r2 (one broker) holding the audit topics, so that a scenario
that loses c2's data cannot lose the audit records that name the loss. While the SDK produces and consumes:
1. kill -9 one broker of c1 and restart it: nothing acknowledged is lost, the audit finds 0 windows with a
   difference;
2. kill -9 every broker of c1 and restart them on their data: c1 is fenced while down and unfenced after,
   every acknowledged message is read again, the group resumes from its committed offsets, duplicates are
   counted and bounded;
3. wipe c2's data and restart it: the log records the loss and the audit names the lost windows.

Rerun: ``.venv/bin/pytest -v tests/spark/test_kafka_durability.py`` (needs ``make kafka``).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

from deploy.kafka_cluster import KafkaCluster
from deploy.launcher import LocalFederation
from sdk import FederatedConsumer, FederatedProducer
from spark_pipeline.events import AUDIT_WINDOW_MS, ensure_topic, event
from spark_pipeline.jobs import audit as audit_job
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

EVENT_STEP_MS = 5  # event time between two events: 12,000 events per audit window
FENCE_WAIT_S = 15.0
"""How long a dead cluster may take to be fenced here (its agent's lease, then the leader's check; a hang guard,
not the goal, which ``make bench`` measures); a cluster that must stay in service is watched as long."""


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalFederation]:
    root = tmp_path_factory.mktemp("durability")
    brokers = {"c1": KafkaCluster(root / "c1", 3), "c2": KafkaCluster(root / "c2", 3), "c3": KafkaCluster(root / "c3")}
    clusters = (("c1", "r1", 0), ("c2", "r1", 0), ("c3", "r2", 0))
    federation = LocalFederation(root, clusters, lend_brokers=brokers.__getitem__)
    try:
        federation.start()
        federation.wait_clusters_healthy(timeout_s=60)
        yield federation
    finally:
        federation.stop()
        for kafka in brokers.values():
            kafka.kill()  # the data is not needed again: no orderly shutdown


def controllers(fed: LocalFederation) -> str:
    return ",".join(fed.quorum.urls)


def kafka(fed: LocalFederation, cluster_id: str) -> KafkaCluster:
    brokers = fed.clusters[cluster_id].brokers
    assert isinstance(brokers, KafkaCluster)
    return brokers


def cluster_state(fed: LocalFederation, cluster_id: str) -> dict[str, Any]:
    return next(c for c in fed.metadata()["clusters"] if c["cluster_id"] == cluster_id)


def create_topics(fed: LocalFederation, topic: str) -> str:
    """``topic`` with 2 partitions on each of c1 and c2, and its audit topic on c3; returns the audit topic's name."""
    audit_topic = f"{topic}.audit"
    ensure_topic(controllers(fed), topic, partitions_per_cluster=2, access=fed.quorum.access)
    ensure_topic(controllers(fed), audit_topic, region="r2", access=fed.quorum.access)
    return audit_topic


class Producing(threading.Thread):
    """Events (``spark_pipeline.events``) keyed by user at a steady pace, acks=all; remembers every
    acknowledged event (id -> cluster) and every failed one, and writes the audit records of what was
    acknowledged."""

    def __init__(self, fed: LocalFederation, topic: str, producer_id: str, start_ms: int, per_s: int = 2000) -> None:
        super().__init__(daemon=True, name=f"producing-{producer_id}")
        self.fed, self.topic, self.producer_id, self.start_ms, self.per_s = fed, topic, producer_id, start_ms, per_s
        self.acked: dict[str, str] = {}  # event id -> cluster that acknowledged it
        self.windows: Counter[int] = Counter()  # acknowledged events per audit window
        self.failed: list[str] = []
        self.errors: Counter[str] = Counter()  # why they failed
        self.sent = 0
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.producer = FederatedProducer(
            {"kfed.controllers": controllers(fed), "linger.ms": 5, "acks": "all", "on_delivery": self._report,
             "message.timeout.ms": 60_000}
        )  # fmt: skip

    def _report(self, err: Any, msg: Any) -> None:
        e = json.loads(msg.value())
        if "id" not in e:  # an audit record
            assert err is None, f"audit record not delivered: {err}"
            return
        with self.lock:
            if err is None:
                placement = self.producer.placement(msg)
                if e["id"] not in self.acked:
                    self.windows[e["event_time_ms"] // AUDIT_WINDOW_MS * AUDIT_WINDOW_MS] += 1
                self.acked[e["id"]] = placement.cluster_id if placement else "?"
            else:
                self.failed.append(e["id"])
                self.errors[err.str()] += 1

    def in_flight(self) -> int:
        with self.lock:
            return self.sent - len(self.acked) - len(self.failed)

    def run(self) -> None:
        rng = random.Random(self.producer_id)
        started = time.monotonic()
        while not self.stop_flag.is_set():
            e = event(self.producer_id, self.sent, self.start_ms + self.sent * EVENT_STEP_MS, rng)
            self.producer.produce(self.topic, value=json.dumps(e).encode(), key=e["user_id"].encode())
            self.sent += 1
            if self.sent % 100 == 0:
                self.producer.poll(0)
                ahead = self.sent / self.per_s - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    def finish(self, audit_topic: str) -> None:
        """Stop, deliver what is queued, then write one audit record per window of acknowledged events."""
        self.stop_flag.set()
        self.join(30)
        assert self.producer.flush(90) == 0, "every message is acknowledged or reported failed"
        for window_start, n in sorted(self.windows.items()):
            record = {"producer": self.producer_id, "topic": self.topic, "window_start_ms": window_start,
                      "window_ms": AUDIT_WINDOW_MS, "count": n}  # fmt: skip
            self.producer.produce(audit_topic, value=json.dumps(record).encode(), key=self.producer_id.encode())
        assert self.producer.flush(60) == 0
        self.producer.close()


class Consuming(threading.Thread):
    """One member of a consumer group, committing every second; records (id, logical partition, offset)."""

    def __init__(self, fed: LocalFederation, topic: str, group: str) -> None:
        super().__init__(daemon=True, name=f"consuming-{group}")
        self.topic = topic
        self.consumer = FederatedConsumer(
            {"kfed.controllers": controllers(fed), "group.id": group, "auto.offset.reset": "earliest",
             "auto.commit.interval.ms": 1000, "kfed.session.timeout.ms": 6000}
        )  # fmt: skip
        self.received: list[tuple[str, int, int]] = []
        self.stop_flag = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop_flag.is_set():
            for m in self.consumer.consume(1000, 0.2):
                if m.error() is None:
                    self.received.append((json.loads(m.value())["id"], m.partition(), m.offset()))
        self.consumer.close()  # commits what it was handed, and leaves

    def ids(self) -> set[str]:
        return {i for i, _, _ in list(self.received)}

    def wait_for(self, ids: set[str], timeout_s: float) -> set[str]:
        deadline = time.monotonic() + timeout_s
        while not ids <= self.ids() and time.monotonic() < deadline:
            time.sleep(0.2)
        return self.ids()

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(30)


def read_ids(spark: Any, fed: LocalFederation, topic: str) -> list[str]:
    """Every event id the kfed source reads from ``topic`` (a batch read to the current ends)."""
    rows = (
        spark.read.format("kfed").option("kfed.controllers", controllers(fed)).option("subscribe", topic).load()
        .select("value").collect()
    )  # fmt: skip
    return [json.loads(r["value"])["id"] for r in rows]


def leader_index(fed: LocalFederation, topic: str, cluster_id: str) -> int:
    """Which broker of ``cluster_id`` leads the first of ``topic``'s partitions there."""
    parts = fed.metadata(topic=topic)["topics"][0]["partitions"]
    leader = next(p["leader"] for p in parts if p["cluster_id"] == cluster_id)
    ports = [f"127.0.0.1:{broker}" for broker, _ in kafka(fed, cluster_id).ports]
    return ports.index(leader)


# -- Spark's own Kafka source: the oracle ----------------------------------------------------------------------------
def test_the_kfed_source_returns_what_sparks_kafka_source_reads_from_each_physical_topic(
    spark: Any, fed: LocalFederation
) -> None:
    topic = "O_oracle"
    ensure_topic(controllers(fed), topic, partitions_per_cluster=2, access=fed.quorum.access)
    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5}) as producer:
        for i in range(6000):
            headers = [("n", str(i).encode()), ("h", None)] if i % 7 == 0 else None
            producer.produce(topic, value=f"v{i}".encode(), key=f"k{i % 101}".encode() if i % 3 else None,
                             headers=headers)  # fmt: skip
        assert producer.flush(60) == 0
    columns = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    ours = (
        spark.read.format("kfed").option("kfed.controllers", controllers(fed)).option("subscribe", topic)
        .option("includeHeaders", "true").load()
    )  # fmt: skip
    ours_rows = {tuple(_plain(r[c]) for c in columns) for r in ours.collect()}
    theirs_rows = set()
    partitions = fed.metadata(topic=topic)["topics"][0]["partitions"]
    for cluster_id in ("c1", "c2"):
        logical = {(p["physical_topic"], p["physical_partition"]): p["partition"] for p in partitions
                   if p["cluster_id"] == cluster_id}  # fmt: skip
        physical_topics = ",".join(sorted({t for t, _ in logical}))
        theirs = (
            spark.read.format("kafka").option("kafka.bootstrap.servers", fed.clusters[cluster_id].bootstrap)
            .option("subscribe", physical_topics).option("startingOffsets", "earliest")
            .option("endingOffsets", "latest").option("includeHeaders", "true").load()
        )  # fmt: skip
        for r in theirs.collect():
            row = {c: _plain(r[c]) for c in columns}
            row["partition"] = logical[(r["topic"], r["partition"])]
            row["topic"] = topic
            theirs_rows.add(tuple(row[c] for c in columns))
    assert len(ours_rows) == 6000
    only_ours, only_theirs = len(ours_rows - theirs_rows), len(theirs_rows - ours_rows)
    assert ours_rows == theirs_rows, f"{only_ours} rows only in kfed's, {only_theirs} only in Spark's"


def _plain(value: Any) -> Any:
    """A Row value as something hashable and comparable (headers: tuples of (key, value))."""
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, list):
        return tuple((h["key"], None if h["value"] is None else bytes(h["value"])) for h in value)
    return value


# -- 1. one broker killed ---------------------------------------------------------------------------------------------
def test_a_broker_killed_under_load_loses_no_acknowledged_message(spark: Any, fed: LocalFederation) -> None:
    topic = "D_one_broker"
    audit_topic = create_topics(fed, topic)
    admin = AdminClient({"bootstrap.servers": fed.clusters["c1"].bootstrap, "log_level": 3})
    replicas = {p.id: len(p.replicas) for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()}
    assert replicas == {0: 3, 1: 3}, "kfed's physical topic is replicated on all 3 brokers"
    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)])
    config = next(iter(configs.values())).result()
    assert config["min.insync.replicas"].value == "2"

    consuming = Consuming(fed, topic, "g-one-broker")
    consuming.start()
    producing = Producing(fed, topic, "one-broker", start_ms=1_800_000_000_000)
    producing.start()
    time.sleep(3)
    victim = leader_index(fed, topic, "c1")
    kafka(fed, "c1").kill(victim)  # kill -9 the leader of a partition being written
    watched = time.monotonic() + FENCE_WAIT_S  # as long as test 2 waits for a dead cluster's fence
    while time.monotonic() < watched:
        assert not cluster_state(fed, "c1")["fenced"], "two of three brokers serve: c1 stays in service"
        time.sleep(0.5)
    kafka(fed, "c1").start(victim)  # on its data: it catches up from the others
    time.sleep(2)
    producing.finish(audit_topic)
    assert not producing.failed, f"{len(producing.failed)} messages failed with 2 of 3 replicas up: {producing.errors}"
    acked = set(producing.acked)
    seen = consuming.wait_for(acked, 90)
    consuming.finish()
    assert acked <= seen, f"{len(acked - seen)} acknowledged messages never consumed"
    assert acked <= set(read_ids(spark, fed, topic)), "the kfed source reads every acknowledged message"
    assert {c for c in producing.acked.values()} == {"c1", "c2"}
    assert audit_job.run(spark, controllers(fed), topic, audit_topic, None) == [], "0 windows with a difference"


# -- 2. every broker of a sub-cluster killed ------------------------------------------------------------------------
def test_a_whole_sub_cluster_killed_and_restarted_on_its_data_loses_nothing_acknowledged(
    spark: Any, fed: LocalFederation
) -> None:
    topic, group = "D_whole", "g-whole"
    create_topics(fed, topic)
    first = Consuming(fed, topic, group)
    first.start()
    before = Producing(fed, topic, "whole-before", start_ms=1_800_001_000_000)
    before.start()
    time.sleep(3)
    before.finish(f"{topic}.audit")
    assert not before.failed
    first.wait_for(set(before.acked), 60)
    time.sleep(2.5)  # past two auto commits: the group's offsets are on c1 and c2
    first.finish()  # closes: commits, leaves
    committed_seen = first.ids()
    assert set(before.acked) <= committed_seen

    during = Producing(fed, topic, "whole-during", start_ms=1_800_002_000_000)
    during.start()
    time.sleep(2)
    kafka(fed, "c1").kill()  # kill -9 all three brokers
    killed = time.monotonic()
    in_flight_at_kill = during.in_flight()  # what may have been written without an acknowledgement
    wait_until(lambda: cluster_state(fed, "c1")["fenced"], FENCE_WAIT_S, "c1 fenced")
    fenced_after = time.monotonic() - killed
    parts = fed.metadata(topic=topic)["topics"][0]["partitions"]
    assert [p["writable"] for p in parts] == [False, False, True, True], "c1's partitions are fenced"
    time.sleep(3)  # production goes on, on c2
    kafka(fed, "c1").start()  # all three, on their data
    wait_until(lambda: not cluster_state(fed, "c1")["fenced"], 60, "c1 unfenced")
    wait_until(lambda: all(p["writable"] for p in fed.metadata(topic=topic)["topics"][0]["partitions"]), 30,
               "c1's partitions writable again")  # fmt: skip
    time.sleep(2)
    during.finish(f"{topic}.audit")

    # every acknowledged message, before and during the outage, is read again from the restarted cluster
    acked = set(before.acked) | set(during.acked)
    read = read_ids(spark, fed, topic)
    assert acked <= set(read), f"{len(acked - set(read))} acknowledged messages lost"
    assert {c for c in during.acked.values()} == {"c1", "c2"}

    # the group resumes from the offsets it committed before c1 died: nothing it had read is read again
    second = Consuming(fed, topic, group)
    second.start()
    second.wait_for(set(during.acked), 90)
    second.finish()
    reread = {(p, o) for _, p, o in second.received} & {(p, o) for _, p, o in first.received}
    assert not reread, f"{len(reread)} records read again: the group did not resume from its commits"
    assert set(during.acked) <= second.ids()
    # at-least-once: a copy written twice can only come from a send in flight when the brokers died
    copies = Counter(read)
    duplicates = sum(n - 1 for n in copies.values() if n > 1)
    failed_but_written = len(set(during.failed) & set(read))
    print(f"\nwhole sub-cluster killed: {len(acked)} acknowledged, {len(during.failed)} reported failed "
          f"({failed_but_written} of them written anyway), {duplicates} duplicate copies, {in_flight_at_kill} "
          f"in flight at the kill; fenced after {fenced_after:.1f} s")  # fmt: skip
    assert duplicates + failed_but_written <= in_flight_at_kill


# -- 3. a sub-cluster's data lost -----------------------------------------------------------------------------------
def test_a_wiped_sub_cluster_is_recorded_in_the_log_and_the_audit_names_the_lost_windows(
    spark: Any, fed: LocalFederation
) -> None:
    topic = "D_wiped"
    audit_topic = create_topics(fed, topic)
    start_ms = 1_800_003_000_000
    producing = Producing(fed, topic, "wiped", start_ms=start_ms, per_s=4000)
    producing.start()
    time.sleep(4)
    producing.finish(audit_topic)
    assert not producing.failed
    lost: Counter[int] = Counter()
    for event_id, cluster_id in producing.acked.items():
        if cluster_id == "c2":
            seq = int(event_id.rsplit("-", 1)[1])
            lost[(start_ms + seq * EVENT_STEP_MS) // AUDIT_WINDOW_MS * AUDIT_WINDOW_MS] += 1
    assert lost and len(lost) >= 1

    c2 = kafka(fed, "c2")
    with fed.quorum.controller_client() as client:
        offset_before = client.get("/v1/metadata")["offset"]
    c2.kill()
    c2.wipe()
    c2.start()  # a new, empty cluster at the same addresses
    wait_until(lambda: not cluster_state(fed, "c2")["fenced"], 90, "c2 unfenced once its topics are recreated")
    with fed.quorum.controller_client() as client:
        records = client.get("/v1/log", offset=offset_before + 1, limit=10_000)["records"]
    reasons = [r["data"]["reason"] for r in records if r["type"] == "ClusterFenced" and r["data"]["cluster_id"] == "c2"]
    assert any("came back empty" in reason and topic in reason for reason in reasons), reasons

    diffs = audit_job.run(spark, controllers(fed), topic, audit_topic, None)
    named = {(r["producer"], r["window_start_ms"]): r["missing"] for r in diffs}
    assert named == {("wiped", window): n for window, n in lost.items()}, "the audit names each lost window"
