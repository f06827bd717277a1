"""Federation operations under load: scale up, lossless shrink, decommission — real quorum, real Apache
Kafka (or Tansu) sub-clusters and agents, a producer and a consumer group running the whole time (never restarted)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from deploy.launcher import LocalFederation
from kfed.cli import main as kfed
from metadata_client.client import READS
from metadata_log.codec import record_from_dict
from metadata_log.image import EMPTY_IMAGE, apply, is_writable
from sdk import FederatedProducer
from tests.waiting import wait_until

from .conftest import TOPIC, Member, controllers, partitions, physical_topics, wait_for

pytestmark = pytest.mark.slow


class Producing(threading.Thread):
    """Key-less messages at a steady pace until stopped; remembers where each acknowledged one landed."""

    def __init__(self, fed: LocalFederation) -> None:
        super().__init__(daemon=True, name="producer")
        self.acked: dict[str, tuple[int, float]] = {}  # value -> (logical partition, ack time)
        self.failed: list[tuple[str, str]] = []  # (value, error): the design promises none in these operations
        self.seen_offsets: list[tuple[int, int]] = []  # (messages produced, the producer's metadata offset then)
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()  # the producer thread reports while the test thread reads `acked`
        self.producer = FederatedProducer(
            {"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": self._report}
        )

    def _report(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.acked[msg.value().decode()] = (msg.partition(), time.monotonic())
            else:
                self.failed.append((msg.value().decode(), err.str()))

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            self.producer.produce(TOPIC, value=str(i).encode())
            i += 1
            if i % 50 == 0:
                self.producer.poll(0)
                self.seen_offsets.append((i, self.producer.metadata_offset))
                time.sleep(0.01)  # ~5k messages/s: load, not a benchmark

    def finish(self) -> None:
        """Stop producing, then deliver what is queued (on the test's thread, where a failed assert counts)."""
        self.stop_flag.set()
        self.join(90)
        assert self.producer.flush(60) == 0
        self.producer.close()
        # Scale-up, shrink and decommission move writes by the log, before any partition stops taking them.
        assert not self.failed, f"{len(self.failed)} deliveries failed, e.g. {self.failed[:3]}"

    def first_ack_on(self, partition_ids: set[int]) -> int | None:
        """The first message (by number) acknowledged on one of ``partition_ids``."""
        with self.lock:
            ids = [int(v) for v, (p, _) in self.acked.items() if p in partition_ids]
        return min(ids) if ids else None

    def produced_when_seen(self, offset: int) -> int:
        """Messages produced by the sample after the first that shows ``offset`` in the producer's followed log
        (routes are rebuilt just after the image moves)."""
        samples = self.seen_offsets
        return next(samples[i + 1][0] for i, (_, seen) in enumerate(samples) if seen >= offset)


def first_offset_where_writable(fed: LocalFederation, partition_ids: set[int]) -> int:
    """The first offset of the log at which every one of ``partition_ids`` takes writes (exists, effectively
    writable, its leader reported): replayed with the same pure ``apply`` the SDK uses."""
    records = fed.quorum.client.get(fed.quorum.url(fed.quorum.leader()) + "/v1/log",
                                    params={"offset": 0, "limit": 10_000, **READS}).json()["records"]  # fmt: skip
    image = EMPTY_IMAGE
    for r in records:
        image = apply(image, [record_from_dict(r["type"], r["data"])])
        topic = image.topics.get(TOPIC)
        if topic is None or len(topic.partitions) <= max(partition_ids):
            continue
        ready = [topic.partitions[p] for p in partition_ids]
        if all(is_writable(image, p) and image.clusters[p.cluster_id].leaders.get((p.physical_topic,
               p.physical_partition)) for p in ready):  # fmt: skip
            return int(r["offset"])
    raise AssertionError(f"partitions {sorted(partition_ids)} never all took writes in the log")


class SlowMember(Member):
    """A group member that can be held back (it stops consuming, as a lagging consumer does)."""

    def __init__(self, fed: LocalFederation, name: str, group: str) -> None:
        super().__init__(fed, name, group)
        self.running = threading.Event()
        self.running.set()

    def consume_once(self) -> None:
        if self.running.wait(0.1):  # held back: membership is kept by the consumer's heartbeat thread
            super().consume_once()


def consume_everything(member: Member, producing: Producing) -> None:
    """Every acknowledged message is consumed (reported failures are the producer's to retry)."""
    expected = set(producing.acked)
    seen = wait_for([member], expected, 90)
    assert expected <= seen, f"{len(expected - seen)} acknowledged messages never consumed"


@pytest.mark.brokers("kafka", "tansu")
def test_scale_up_from_two_to_three_clusters_while_producing(fed: LocalFederation, capsys: Any) -> None:
    member = Member(fed, "m", "g-scale")
    member.start()
    producing = Producing(fed)
    producing.start()
    time.sleep(1.0)
    fed.add_cluster("c3", "r1")
    fed.wait_clusters_healthy(["c3"], timeout_s=30)
    assert kfed(["topic", "expand", TOPIC, "--cluster", "c3", "--partitions", "4", "--controller",
                 controllers(fed), *fed.quorum.token_args]) == 0  # fmt: skip
    assert "live on c3" in capsys.readouterr().out
    wait_until(lambda: producing.first_ack_on({8, 9, 10, 11}), 10, "a message acknowledged on c3's partitions")
    time.sleep(1.0)
    producing.finish()
    # Bounded in the system's own terms: once the producer's followed log shows c3's partitions taking
    # writes, the next round of its key-less round robin over the 12 partitions reaches them.
    ready = producing.produced_when_seen(first_offset_where_writable(fed, {8, 9, 10, 11}))
    first = producing.first_ack_on({8, 9, 10, 11})
    assert first is not None and first <= ready + 12, f"c3's partitions used from message {first}, ready at {ready}"
    assert {p for p, _ in producing.acked.values()} >= {8, 9, 10, 11}
    assert physical_topics(fed.clusters["c3"].bootstrap) == {TOPIC: 4}
    consume_everything(member, producing)
    member.finish()
    assert kfed(["topic", "expand", TOPIC, "--cluster", "c3", "--partitions", "4", "--controller",
                 controllers(fed), *fed.quorum.token_args]) == 0, "re-running changes nothing"  # fmt: skip
    assert len(partitions(fed)) == 12


def test_shrink_two_of_eight_partitions_losslessly(fed: LocalFederation) -> None:
    member = SlowMember(fed, "m", "g-shrink")
    member.start()
    producing = Producing(fed)
    producing.start()
    read_before_removal: dict[int, set[str]] = {}  # what the group had read when the partition was removed
    watching = threading.Event()

    def watch() -> None:
        while not watching.is_set():
            for p in partitions(fed):
                if p["state"] == "removed" and p["partition"] not in read_before_removal:
                    read_before_removal[p["partition"]] = {
                        v for v, part, _ in member.received if part == p["partition"]
                    }
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    time.sleep(1.5)
    member.running.clear()  # the group lags: P6 and P7 must wait for it
    assert kfed(["topic", "shrink", TOPIC, "--partitions", "6,7", "--timeout-s", "6", "--controller",
                 controllers(fed), *fed.quorum.token_args]) == 3, "still draining while the group lags"  # fmt: skip
    assert [p["state"] for p in partitions(fed)][6:] == ["read_only", "read_only"]
    member.running.set()
    assert kfed(["topic", "shrink", TOPIC, "--partitions", "6", "7", "--timeout-s", "60", "--controller",
                 controllers(fed), *fed.quorum.token_args]) == 0, "re-running watches until done"  # fmt: skip
    time.sleep(0.5)
    watching.set()
    watcher.join()
    states = [p["state"] for p in partitions(fed)]
    assert states == ["writable"] * 6 + ["removed"] * 2
    time.sleep(1.0)
    producing.finish()
    consume_everything(member, producing)
    member.finish()
    for p in (6, 7):
        acked_there = {v for v, (part, _) in producing.acked.items() if part == p}
        assert acked_there, f"nothing reached P{p} before the shrink"
        unread = acked_there - read_before_removal[p]
        assert not unread, f"P{p} was removed before the group read {len(unread)} of its messages"
    with fed.quorum.controller_client() as client:
        grown = client.post(f"/v1/topics/{TOPIC}/partitions", {"cluster_id": "c2", "count": 1})
    assert [(p["partition"], p["state"]) for p in grown["partitions"]][6:] == [
        (6, "removed"), (7, "removed"), (8, "writable"),
    ], "logical ids 6 and 7 are never reused"  # fmt: skip


def test_decommission_a_cluster_under_load(fed: LocalFederation) -> None:
    member = Member(fed, "m", "g-decom")
    member.start()
    producing = Producing(fed)
    producing.start()
    time.sleep(1.5)
    with fed.quorum.controller_client() as client:
        start_offset = client.get("/v1/metadata")["offset"]
    assert (
        kfed(
            [
                "cluster",
                "decommission",
                "c2",
                "--timeout-s",
                "90",
                "--controller",
                controllers(fed),
                *fed.quorum.token_args,
            ]
        )
        == 0
    )
    producing.finish()
    consume_everything(member, producing)
    with fed.quorum.controller_client() as client:
        records = client.get("/v1/log", offset=start_offset + 1, limit=10_000)["records"]
    steps = [
        r["data"]["state"] for r in records if r["type"] == "ClusterStateChanged" and r["data"]["cluster_id"] == "c2"
    ]
    assert steps == ["read_only", "draining", "decommissioned"]
    assert [p["state"] for p in partitions(fed)] == ["writable"] * 4 + ["removed"] * 4
    wait_until(lambda: TOPIC not in physical_topics(fed.clusters["c2"].bootstrap), 20, "c2's physical topic deleted")
    member.finish()
