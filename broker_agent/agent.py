"""``kfed agent``: one per physical cluster. Registers it, keeps its lease, reports its health and
leaders, and reconciles it to the metadata log.

Each beat (default every 500 ms): probe the cluster with a metadata request; if it does not answer,
report it unhealthy at once (the leader fences it without waiting for the lease). Otherwise compare it
with the log: create the physical topics the log places here, delete those whose logical partitions are
all removed (or whose logical topic was deleted), report leader changes, report drain progress of the
partitions on their way out (first and end offset, each known group's commit), and heartbeat. A cluster that
came back *empty* (managed topics gone, or offsets behind what was seen — a memory-storage broker that
restarted, a wiped cluster) is reported unhealthy, with the reason, until its topics are recreated: it
is never served as if nothing had happened.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from metadata_client.access import NO_ACCESS, Access
from metadata_client.client import ControllerClient
from metadata_client.follower import LogFollower
from metadata_log.commands import MAX_PARTITIONS_PER_REQUEST, PhysicalPartition, leader_ranges, seals_to_measure
from metadata_log.errors import Conflict, InvalidRequest, KfedError, NotFound
from metadata_log.image import MetadataImage
from metadata_log.publisher import LogDelta

from . import reconcile
from .kafka import CannotGrow, ClusterUnreachable, PhysicalCluster, Scan

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    heartbeat_ms: int = 500
    probe_timeout_ms: int = 1000
    offsets_check_every: int = 10  # beats between checks that offsets did not go backwards
    # Failed probes in a row before the cluster is reported unhealthy: one slow answer on a busy host must
    # not fence a cluster (and fill the log with fence/unfence pairs); costs one beat of fencing latency.
    failures_to_fence: int = 2
    drain_report_every: int = 2  # beats between drain measurements while partitions here are draining
    # A physical topic the log retired is deleted this long after the agent first saw it retired, so that
    # clients following the log have dropped it by then (see _due_for_deletion).
    retire_grace_ms: int = 3000
    replication_factor: int = -1
    # A strict topic's seal on a partition here is measured this long after the agent first saw its epoch
    # pending (docs/KEY_ORDER.md, decision 3): producers that routed by the epoch before have seen the new
    # one and had their in-flight writes acknowledged by then. The drain check's grace, for the same reason.
    key_seal_grace_ms: int = 2000


class Agent:
    def __init__(
        self,
        cluster_id: str,
        region: str,
        bootstrap: str,
        controllers: Sequence[str] | str,
        settings: AgentSettings | None = None,
        access: Access = NO_ACCESS,
    ) -> None:
        """``access``: the admin token (agents report for their cluster) and the controllers' CA."""
        self.cluster_id = cluster_id
        self.region = region
        self.bootstrap = bootstrap
        self.settings = settings or AgentSettings()
        self.cluster = PhysicalCluster(
            bootstrap, self.settings.probe_timeout_ms / 1000, self.settings.replication_factor
        )
        deadline_s = max(1.0, 2 * self.settings.heartbeat_ms / 1000)
        self.client = ControllerClient(controllers, deadline_s=deadline_s, access=access)
        # its own cluster's topics and leaders, and the federation-wide kinds (metadata_log/selection.py)
        self.follower = LogFollower(controllers, wait_ms=5000, publisher=self, access=access, clusters=[cluster_id])
        self._deleted_topics: set[str] = set()  # physical topics of logical topics deleted from the log
        self._seen_topics: set[str] = set()  # managed topics this agent has seen on the cluster
        self._seen_offsets: dict[tuple[str, int], int] = {}
        self._loss: str | None = None  # why the cluster is considered to have lost its data
        self._loss_fenced = False  # the quorum fenced the cluster for that loss
        self._beats = 0
        self._placement_cache: tuple[int, reconcile.ClusterPlan] | None = None
        self._failed_probes = 0
        self._unreachable = "cluster unreachable"
        self._retired_since: dict[str, float] = {}  # physical topic -> when first seen retired
        self._told_cannot_grow: set[tuple[str, int]] = set()
        self._epochs_seen: dict[tuple[str, int], float] = {}  # (strict topic, epoch) with seals to measure here
        self._stop = threading.Event()
        self.healthy = False
        self.reason: str | None = "starting"

    # -- lifecycle ---------------------------------------------------------------------------------
    def run(self) -> None:
        """Register, follow the log, and beat until ``stop()``."""
        self.register()
        self.follower.start()
        interval = self.settings.heartbeat_ms / 1000
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.step()
            except Exception:
                log.exception("agent step failed")
            self._stop.wait(max(0.0, interval - (time.monotonic() - started)))
        self.follower.stop()
        self.client.close()

    def stop(self) -> None:
        self._stop.set()

    def register(self) -> None:
        """Register the cluster (idempotent: a restarted agent changes nothing); retries until it works."""
        while not self._stop.is_set():
            try:
                body = {"cluster_id": self.cluster_id, "region": self.region, "bootstrap_servers": self.bootstrap}
                reply = self.client.post("/v1/clusters", body)
                log.info("cluster %s registered in %s (offset %s)", self.cluster_id, self.region, reply["offset"])
                return
            except (Conflict, InvalidRequest):
                raise  # registered in another region, a bad bootstrap list: retrying cannot help
            except KfedError as e:
                log.warning("registering %s failed (%s); retrying", self.cluster_id, e)
                self._stop.wait(1.0)

    # -- one beat ----------------------------------------------------------------------------------
    def step(self) -> None:
        self._beats += 1
        image = self.follower.image
        try:
            scan = self.cluster.scan()
            self._failed_probes = 0
        except ClusterUnreachable as e:
            self._failed_probes += 1
            if self._failed_probes == 1:  # one reason per outage: the log records a fence when the reason changes
                self._unreachable = f"cluster unreachable: {e}"[:500]  # the API takes reasons of 500 characters
            if self._failed_probes >= self.settings.failures_to_fence:
                self._heartbeat(image, healthy=False, reason=self._unreachable)
            else:
                self._heartbeat(image, healthy=self.healthy, reason=self.reason)  # keep the lease, judge later
            return
        self._check_for_loss(image, scan)
        if self._loss is not None and not self._loss_fenced:
            # Report the loss before repairing it: the cluster must be fenced, with the reason in the log,
            # even when the broker restarted between two probes and could be repaired at once.
            reply = self._heartbeat(image, healthy=False, reason=self._loss)
            # fenced for this reason: a cluster already fenced as unreachable is fenced again for the loss
            self._loss_fenced = bool(reply and reply.get("fenced") and reply.get("fenced_reason") == self._loss)
            if not self._loss_fenced:
                return
        scan = self._reconcile(image, scan)
        self._report_leaders(image, scan)
        if self._beats % self.settings.drain_report_every == 0 and self._loss is None:
            self._report_drain(image)
        if self._loss is None and image.key_orders:
            self._report_key_seals(image)
        healthy = self._loss is None
        self._heartbeat(image, healthy, None if healthy else self._loss)

    def _check_for_loss(self, image: MetadataImage, scan: Scan) -> None:
        desired = self._placement(image).desired
        vanished = sorted(t for t in self._seen_topics & set(desired) if t not in scan.topics)
        if vanished and self._loss is None:
            named = ", ".join(vanished[:5]) + (f" and {len(vanished) - 5} more" if len(vanished) > 5 else "")
            self._loss = f"cluster came back empty: physical topics {named} are gone; recreating them"
            log.error("%s: %s", self.cluster_id, self._loss)
        if self._beats % self.settings.offsets_check_every == 0 and self._loss is None:
            partitions = [(t, p) for t in desired if t in scan.topics for p in scan.topics[t]]
            try:
                offsets = self.cluster.latest_offsets(partitions)
            except ClusterUnreachable:
                return
            behind = sorted(f"{t}/{p}" for (t, p), o in offsets.items() if o < self._seen_offsets.get((t, p), -1))
            if behind:
                self._loss = f"cluster lost data: offsets of {', '.join(behind[:5])} went backwards"
                log.error("%s: %s", self.cluster_id, self._loss)
                self._seen_offsets.clear()
            else:
                self._seen_offsets.update(offsets)

    def _reconcile(self, image: MetadataImage, scan: Scan) -> Scan:
        """Carry out the plan; returns the cluster as it is now (scanned again when something changed)."""
        if self.follower.snapshots_loaded == 0:
            return scan  # not following the log yet: nothing to compare with
        where = self._placement(image)
        plan = reconcile.plan(where, scan.partition_counts(), self._deleted_topics, recovering=self._loss is not None)
        plan = replace(plan, delete=self._due_for_deletion(plan.delete))
        try:
            if plan.recreate:
                log.warning("%s: recreating %s with their partition counts", self.cluster_id, dict(plan.recreate))
                self.cluster.delete_topics(plan.recreate)
                time.sleep(0.2)
                self.cluster.create_topics(plan.recreate)
            if plan.create:
                log.info("%s: creating physical topics %s", self.cluster_id, dict(plan.create))
                self.cluster.create_topics(plan.create)
            if plan.grow:
                self._grow(plan.grow)
            if plan.delete:
                log.info("%s: deleting physical topics %s", self.cluster_id, list(plan.delete))
                self.cluster.delete_topics(plan.delete)
                self._deleted_topics -= set(plan.delete)
        except ClusterUnreachable as e:
            log.warning("%s: reconciliation failed: %s", self.cluster_id, e)
            return scan
        if not plan.empty:
            scan = self.cluster.scan()
        desired = where.desired
        counts = scan.partition_counts()
        complete = all(counts.get(t, 0) >= n for t, n in desired.items())
        self._seen_topics |= {t for t in desired if t in counts}
        self._deleted_topics &= set(counts)  # forget deletions the cluster has caught up with
        if complete and self._loss is not None:
            log.warning("%s: physical topics recreated; the cluster can be unfenced", self.cluster_id)
            self._loss = None
            self._loss_fenced = False
            self._seen_offsets.clear()
        return scan

    def _grow(self, topics: Mapping[str, int]) -> None:
        """Add the partitions an expand placed in physical topics that exist here (CreatePartitions); a broker
        without it (Tansu) is told about once per topic and count: those partitions stay without a leader."""
        try:
            log.info("%s: adding partitions to physical topics %s", self.cluster_id, dict(topics))
            self.cluster.grow_topics(topics)
        except CannotGrow as e:
            told = set(topics.items())
            if not told <= self._told_cannot_grow:
                log.error(
                    "%s: %s; place the new partitions in a new physical topic (--physical-topic)", self.cluster_id, e
                )
                self._told_cannot_grow |= told

    def _due_for_deletion(self, retired: tuple[str, ...]) -> tuple[str, ...]:
        """The retired topics first seen retired at least ``retire_grace_ms`` ago.

        Consumers drop a partition when they see its removal in the log; deleting the topic before they
        have would pull it from under them — and librdkafka 2.16 crashes (SIGSEGV in its metadata cache)
        when a topic a live consumer has known is deleted on Tansu.
        """
        now = time.monotonic()
        self._retired_since = {t: self._retired_since.get(t, now) for t in retired}
        grace_s = self.settings.retire_grace_ms / 1000
        return tuple(t for t in retired if now - self._retired_since[t] >= grace_s)

    def _placement(self, image: MetadataImage) -> reconcile.ClusterPlan:
        """This cluster's placement, computed once per image offset (it scans every partition)."""
        if self._placement_cache is None or self._placement_cache[0] != image.offset:
            self._placement_cache = (image.offset, reconcile.placement(image, self.cluster_id))
        return self._placement_cache[1]

    def _report_leaders(self, image: MetadataImage, scan: Scan) -> None:
        cluster = image.clusters.get(self.cluster_id)
        if cluster is None:
            return
        desired = self._placement(image).desired
        seen: dict[tuple[str, int], str | None] = {}
        for topic in desired:
            for partition, leader in scan.topics.get(topic, {}).items():
                seen[(topic, partition)] = leader
        changes = [
            PhysicalPartition(t, p, leader)
            for (t, p), leader in sorted(seen.items())
            if cluster.leaders.get((t, p)) != leader
        ]
        changes += [PhysicalPartition(t, p, None) for (t, p) in sorted(cluster.leaders) if (t, p) not in seen]
        if not changes:
            return
        try:
            for at in range(0, len(changes), MAX_PARTITIONS_PER_REQUEST):
                chunk = changes[at : at + MAX_PARTITIONS_PER_REQUEST]
                try:
                    report = [asdict(r) for r in leader_ranges(chunk)]
                    self.client.post(f"/v1/agents/{self.cluster_id}/partitions", {"leaders": report})
                except InvalidRequest as e:
                    if e.extra.get("field") != "leaders":
                        raise
                    # a controller older than the compact form (during an upgrade): one entry per partition
                    rows = [{"physical_topic": c.physical_topic, "physical_partition": c.physical_partition,
                             "leader": c.leader} for c in chunk]  # fmt: skip
                    self.client.post(f"/v1/agents/{self.cluster_id}/partitions", {"partitions": rows})
        except KfedError as e:
            log.warning("%s: reporting %d partition changes failed: %s", self.cluster_id, len(changes), e)

    def _report_drain(self, image: MetadataImage) -> None:
        """Measure the partitions on their way out and tell the leader, which decides when they are done."""
        draining = self._placement(image).draining
        if not draining:
            return
        try:
            offsets = self.cluster.drain_offsets(draining)
            committed = self.cluster.committed_offsets(image.groups, draining)
        except ClusterUnreachable as e:
            log.warning("%s: measuring %d draining partitions failed: %s", self.cluster_id, len(draining), e)
            return
        report = [
            {"physical_topic": t, "physical_partition": p, "start": start, "end": end, "committed": committed[(t, p)]}
            for (t, p), (start, end) in sorted(offsets.items())
        ]
        try:
            self.client.post(f"/v1/agents/{self.cluster_id}/drain", {"partitions": report})
        except KfedError as e:
            log.warning("%s: reporting drain progress failed: %s", self.cluster_id, e)

    def _report_key_seals(self, image: MetadataImage) -> None:
        """Measure the seals of strict topics' latest epochs on this cluster, once their grace has passed
        since this agent first saw them pending, and report them (the leader records ``KeyOrderSealed``)."""
        pending = seals_to_measure(image, self.cluster_id)
        now = time.monotonic()
        live = {(topic, epoch) for topic, epoch, _ in pending}
        self._epochs_seen = {key: since for key, since in self._epochs_seen.items() if key in live}
        due: dict[tuple[str, int], dict[int, tuple[str, int]]] = {}  # (topic, epoch) -> partition -> physical
        for topic, epoch, partition in pending:
            since = self._epochs_seen.setdefault((topic, epoch), now)
            if now - since >= self.settings.key_seal_grace_ms / 1000:
                p = image.topics[topic].partitions[partition]
                due.setdefault((topic, epoch), {})[partition] = (p.physical_topic, p.physical_partition)
        if not due:
            return
        try:
            ends = self.cluster.drain_offsets([tp for physical in due.values() for tp in physical.values()])
        except ClusterUnreachable as e:
            log.warning("%s: measuring key-order seals failed: %s", self.cluster_id, e)
            return
        for (topic, epoch), physical in sorted(due.items()):
            end_offsets = {str(p): ends[tp][1] for p, tp in physical.items() if tp in ends}
            if not end_offsets:
                continue
            try:
                body = {"topic": topic, "epoch": epoch, "end_offsets": end_offsets}
                self.client.post(f"/v1/agents/{self.cluster_id}/key-seals", body)
                log.info("%s: sealed %s epoch %d at %s", self.cluster_id, topic, epoch, end_offsets)
            except KfedError as e:  # the epoch moved on (its seals abandoned), or the leader is away: next beat
                log.warning("%s: reporting seals of %s epoch %d failed: %s", self.cluster_id, topic, epoch, e)

    def _heartbeat(self, image: MetadataImage, healthy: bool, reason: str | None) -> dict[str, Any] | None:
        """The leader's reply (with ``fenced``), or None when the beat did not get through."""
        self.healthy, self.reason = healthy, reason
        try:
            return dict(
                self.client.post(
                    f"/v1/agents/{self.cluster_id}/heartbeat",
                    {"applied_offset": image.offset, "healthy": healthy, "reason": reason},
                )
            )
        except NotFound:
            log.warning("%s is not registered (a new quorum?): registering again", self.cluster_id)
            self.register()
        except KfedError as e:
            log.warning("%s: heartbeat failed: %s", self.cluster_id, e)
        return None

    # -- publisher of the followed log (on the follower's thread) -----------------------------------
    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        """Remember the physical topics here of each logical topic the log deleted."""
        previous, here = delta.base.topics, self.cluster_id
        for name in delta.changes.topics_deleted:
            self._deleted_topics |= {p.physical_topic for p in previous[name].partitions if p.cluster_id == here}
