"""Model-based test (Hypothesis RuleBasedStateMachine): commands + apply against a plain-dict model.

The model is written independently of the commands: it predicts, for every random request, whether it
must be refused and what the metadata looks like after it. After every step the image must equal the
model, replay from its own snapshot, and keep the log's invariants.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from metadata_log import commands
from metadata_log.errors import KfedError
from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.snapshot import read_records, read_rows, write_records, write_rows

CLUSTERS = st.sampled_from(["c1", "c2", "c3", "c4"])
REGIONS = st.sampled_from(["r1", "r2"])
TOPICS = st.sampled_from(["t1", "t2", "t3"])
CLUSTER_STATES = st.sampled_from(["active", "read_only", "draining", "decommissioned", "bogus"])
PARTITION_STATES = st.sampled_from(["writable", "read_only", "removed", "bogus"])

CLUSTER_NEXT = {
    "active": {"read_only"},
    "read_only": {"active", "draining"},
    "draining": {"read_only", "decommissioned"},
    "decommissioned": set(),
}
PARTITION_NEXT = {"writable": {"read_only"}, "read_only": {"writable", "removed"}, "removed": set()}


class MetadataMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.image = EMPTY_IMAGE
        self.records = 0
        self.clusters: dict[str, dict[str, Any]] = {}  # id -> region, state
        self.topics: dict[str, dict[str, Any]] = {}  # name -> region, partitions [(cluster, phys, state)]
        self.ids = 0

    @initialize()
    def seed(self) -> None:
        """Start from a small federation so random steps reach deep states (read_only, removed, ...)."""
        for cluster, region in (("c1", "r1"), ("c2", "r1"), ("c3", "r2")):
            self.register(cluster, region)
        self.create("t1", "r1", 2)

    def _run(self, result_or_error: Any, expect_ok: bool) -> bool:
        if isinstance(result_or_error, KfedError):
            assert not expect_ok, f"refused but the model expected success: {result_or_error}"
            return False
        assert expect_ok, "accepted but the model expected a refusal"
        self.image = apply(self.image, result_or_error.records)
        self.records += len(result_or_error.records)
        return True

    @staticmethod
    def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KfedError as e:
            return e

    @rule(cluster=CLUSTERS, region=REGIONS)
    def register(self, cluster: str, region: str) -> None:
        known = self.clusters.get(cluster)
        ok = known is None or (known["region"] == region and known["state"] != "decommissioned")
        if self._run(self._call(commands.register_cluster, self.image, cluster, region, "h:1"), ok) and not known:
            self.clusters[cluster] = {"region": region, "state": "active"}

    def _may_retire(self, cluster: str) -> bool:
        """The region's topics can still be written without ``cluster``."""
        region = self.clusters[cluster]["region"]
        others = {
            c for c, v in self.clusters.items() if v["region"] == region and c != cluster and v["state"] == "active"
        }
        topics = [t for t in self.topics.values() if t["region"] == region]
        if topics and not others:
            return False
        return all(
            any(c in others and s == "writable" for c, _, s in t["partitions"])
            for t in topics
            if any(c == cluster and s != "removed" for c, _, s in t["partitions"])
        )

    def _retire_partitions(self, cluster: str) -> None:
        for t in self.topics.values():
            t["partitions"] = [(c, p, "removed" if c == cluster else s) for c, p, s in t["partitions"]]

    @rule(cluster=CLUSTERS, state=CLUSTER_STATES)
    def cluster_state(self, cluster: str, state: str) -> None:
        known = self.clusters.get(cluster)
        ok = known is not None and (state == known["state"] or state in CLUSTER_NEXT[known["state"]])
        if ok and known is not None and state != known["state"] and state in ("draining", "decommissioned"):
            ok = self._may_retire(cluster)
        if self._run(self._call(commands.change_cluster_state, self.image, cluster, state), ok):
            if state == "decommissioned" and self.clusters[cluster]["state"] != state:
                self._retire_partitions(cluster)
            self.clusters[cluster]["state"] = state

    @rule(cluster=CLUSTERS)
    def decommission(self, cluster: str) -> None:
        known = self.clusters.get(cluster)
        ok = known is not None and (known["state"] in ("draining", "decommissioned") or self._may_retire(cluster))
        accepted = self._run(self._call(commands.decommission_cluster, self.image, cluster), ok)
        if accepted and self.clusters[cluster]["state"] in ("active", "read_only"):
            self.clusters[cluster]["state"] = "draining"

    @rule(topic=TOPICS, partitions=st.lists(st.integers(min_value=0, max_value=4), min_size=1, max_size=3))
    def shrink(self, topic: str, partitions: list[int]) -> None:
        t = self.topics.get(topic)
        ok = t is not None and all(p < len(t["partitions"]) for p in partitions)
        if ok:
            ok = any(s == "writable" and i not in partitions for i, (_, _, s) in enumerate(t["partitions"]))  # type: ignore[index]
        if self._run(self._call(commands.shrink_partitions, self.image, topic, partitions), ok):
            t["partitions"] = [  # type: ignore[index]
                (c, p, "read_only" if i in partitions and s == "writable" else s)
                for i, (c, p, s) in enumerate(t["partitions"])  # type: ignore[index]
            ]

    @rule(topic=TOPICS, region=REGIONS, n=st.integers(min_value=0, max_value=3))
    def create(self, topic: str, region: str, n: int) -> None:
        active = sorted(c for c, v in self.clusters.items() if v["region"] == region and v["state"] == "active")
        ok = n >= 1 and topic not in self.topics and bool(active)
        self.ids += 1
        result = self._call(commands.create_topic, self.image, topic, region, n, topic_id=f"id{self.ids}")
        if self._run(result, ok):
            parts = [(c, p, "writable") for c in active for p in range(n)]
            self.topics[topic] = {"region": region, "partitions": parts}

    @rule(topic=TOPICS, cluster=CLUSTERS, n=st.integers(min_value=1, max_value=3))
    def expand(self, topic: str, cluster: str, n: int) -> None:
        t, c = self.topics.get(topic), self.clusters.get(cluster)
        ok = t is not None and c is not None and c["region"] == t["region"] and c["state"] == "active"
        if self._run(self._call(commands.add_partitions, self.image, topic, cluster, n), ok):
            used = [p for (cid, p, _) in t["partitions"] if cid == cluster]  # type: ignore[index]
            start = max(used) + 1 if used else 0
            t["partitions"] += [(cluster, start + i, "writable") for i in range(n)]  # type: ignore[index]

    @rule(topic=TOPICS, partition=st.integers(min_value=0, max_value=3), state=PARTITION_STATES)
    def partition_state(self, topic: str, partition: int, state: str) -> None:
        t = self.topics.get(topic)
        ok = t is not None and partition < len(t["partitions"])
        if ok:
            current = t["partitions"][partition][2]  # type: ignore[index]
            writable_others = sum(
                1
                for i, (_, _, s) in enumerate(t["partitions"])
                if s == "writable" and i != partition  # type: ignore[index]
            )
            ok = state == current or (state in PARTITION_NEXT[current] and (state == "writable" or writable_others > 0))
        if self._run(self._call(commands.change_partition_state, self.image, topic, partition, state), ok):
            cid, phys, _ = t["partitions"][partition]  # type: ignore[index]
            t["partitions"][partition] = (cid, phys, state)  # type: ignore[index]

    @rule(topic=TOPICS)
    def delete(self, topic: str) -> None:
        if self._run(self._call(commands.delete_topic, self.image, topic), topic in self.topics):
            del self.topics[topic]

    @invariant()
    def image_matches_model(self) -> None:
        assert self.image.offset == self.records - 1
        assert {c: (v.region, v.state) for c, v in self.image.clusters.items()} == {
            c: (v["region"], v["state"]) for c, v in self.clusters.items()
        }
        assert {
            name: [(p.cluster_id, p.physical_partition, p.state) for p in t.partitions]
            for name, t in self.image.topics.items()
        } == {name: t["partitions"] for name, t in self.topics.items()}

    @invariant()
    def log_invariants(self) -> None:
        for t in self.image.topics.values():
            assert [p.partition for p in t.partitions] == list(range(len(t.partitions)))
            assert all(self.image.clusters[p.cluster_id].region == t.region for p in t.partitions)
            placements = [(p.cluster_id, p.physical_topic, p.physical_partition) for p in t.partitions]
            assert len(set(placements)) == len(placements)

    @invariant()
    def snapshot_round_trips(self) -> None:
        assert read_records(write_records(self.image), self.image.offset) == self.image
        assert read_rows(write_rows(self.image), self.image.offset) == self.image


TestMetadataModel = MetadataMachine.TestCase
TestMetadataModel.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
