"""The physical sub-clusters of the image (Kafka's ``ClusterImage`` / ``ClusterDelta``).

``ClusterDelta`` replays the records of one batch that change clusters, one record at a time
(``replay_*``) or a run at a time from columns (``register``, ``report_leaders``); both give the same
image and the same first error. A cluster's leaders are kept compact (``partitions.Leaders``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from ..records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    ClusterUnfenced,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
)
from .common import InvalidRecord, evolve, runs_of
from .partitions import EMPTY_LEADERS, Leaders, LeadersBuilder

CLUSTER_TRANSITIONS: Final[Mapping[ClusterState, frozenset[ClusterState]]] = {
    "active": frozenset({"read_only"}),
    "read_only": frozenset({"active", "draining"}),
    "draining": frozenset({"read_only", "decommissioned"}),
    "decommissioned": frozenset(),
}
"""Allowed cluster admin-state changes (decommission is the seeds' read_only -> draining -> decommissioned)."""


@dataclass(frozen=True, slots=True)
class ClusterImage:
    cluster_id: str
    region: str
    bootstrap_servers: str
    state: ClusterState = "active"
    fenced: bool = False
    fenced_reason: str | None = None
    fenced_since_ms: int | None = None
    leaders: Leaders = EMPTY_LEADERS  # (physical topic, physical partition) -> "host:port", as its agent reported


class LastRegistrations:
    """(cluster, region, bootstrap servers) of each cluster that is not decommissioned, for the last cluster
    map asked about: what a registration that changes nothing repeats. The map of an image is never changed
    once the image is built (a delta copies it first), and it is held here, so the same object has the same
    content; it stays the same from image to image until a cluster changes, while agents register again
    all along. One is kept by each line of images (``MetadataImage.replay_memo``).

    Built only when the same map is asked about a second time: a run of new clusters changes the map with
    every command, and building the set of tens of thousands of clusters per command would cost each new
    registration far more than the set saves."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[Mapping[str, ClusterImage], frozenset[tuple[str, str, str]] | None] | None = None

    def of(self, clusters: Mapping[str, ClusterImage]) -> frozenset[tuple[str, str, str]] | None:
        """The registrations of ``clusters``, or None the first time this map is asked about."""
        last = self._last  # one read: another thread may replace it meanwhile
        if last is None or last[0] is not clusters:
            self._last = (clusters, None)
            return None
        if last[1] is not None:
            return last[1]
        registrations = frozenset(
            (c.cluster_id, c.region, c.bootstrap_servers) for c in clusters.values() if c.state != "decommissioned"
        )
        self._last = (clusters, registrations)
        return registrations


class ClusterDelta:
    """Changes to the clusters over ``base`` (copy-on-write: the base map is never changed)."""

    __slots__ = ("_base", "_changed", "_leaders", "_registrations", "_touched")

    def __init__(self, base: Mapping[str, ClusterImage], registrations: LastRegistrations) -> None:
        self._base = base
        self._changed: dict[str, ClusterImage] | None = None
        self._leaders: dict[str, LeadersBuilder] | None = None  # clusters whose leaders changed
        self._registrations = registrations
        self._touched: set[str] = set()  # clusters a record other than a leader report was replayed on

    def current(self) -> Mapping[str, ClusterImage]:
        """The clusters as replayed so far (leader changes are merged in by ``apply``)."""
        return self._changed if self._changed is not None else self._base

    def _writable(self) -> dict[str, ClusterImage]:
        if self._changed is None:
            self._changed = dict(self._base)
        return self._changed

    def _set(self, cluster: ClusterImage) -> None:
        self._writable()[cluster.cluster_id] = cluster
        self._touched.add(cluster.cluster_id)

    def _cluster(self, cluster_id: str) -> ClusterImage:
        cluster = self.current().get(cluster_id)
        if cluster is None:
            raise InvalidRecord(f"cluster {cluster_id!r} is not registered")
        return cluster

    # -- one record at a time ------------------------------------------------------------------------
    def replay_registered(self, record: ClusterRegistered) -> None:
        existing = self.current().get(record.cluster_id)
        if existing is None:
            self._set(
                ClusterImage(
                    cluster_id=record.cluster_id, region=record.region, bootstrap_servers=record.bootstrap_servers
                )
            )
            return
        if existing.region != record.region:
            raise InvalidRecord(
                f"cluster {record.cluster_id!r} is registered in region {existing.region!r}, not {record.region!r}"
            )
        if existing.state == "decommissioned":
            raise InvalidRecord(f"cluster {record.cluster_id!r} is decommissioned")
        if existing.bootstrap_servers != record.bootstrap_servers:  # else nothing changes (e.g. a retried write)
            self._set(evolve(existing, bootstrap_servers=record.bootstrap_servers))

    def replay_state_changed(self, record: ClusterStateChanged) -> None:
        cluster = self._cluster(record.cluster_id)
        if record.state not in CLUSTER_TRANSITIONS[cluster.state]:
            raise InvalidRecord(f"cluster {record.cluster_id!r} cannot go from {cluster.state} to {record.state}")
        self._set(evolve(cluster, state=record.state))

    def replay_fenced(self, record: ClusterFenced) -> None:
        cluster = self._cluster(record.cluster_id)
        if cluster.fenced:
            raise InvalidRecord(f"cluster {record.cluster_id!r} is already fenced")
        self._set(evolve(cluster, fenced=True, fenced_reason=record.reason, fenced_since_ms=record.at_ms))

    def replay_unfenced(self, record: ClusterUnfenced) -> None:
        cluster = self._cluster(record.cluster_id)
        if not cluster.fenced:
            raise InvalidRecord(f"cluster {record.cluster_id!r} is not fenced")
        self._set(evolve(cluster, fenced=False, fenced_reason=None, fenced_since_ms=None))

    def replay_leader_reported(self, record: PhysicalPartitionsReported) -> None:
        self._leaders_of(record.cluster_id).set(record.physical_topic, (record.physical_partition,), (record.leader,))

    def replay_leaders_reported(self, record: PhysicalLeadersReported) -> None:
        self._leaders_of(record.cluster_id).set_ranges(
            record.physical_topic, record.brokers, record.ranges, record.leaders
        )

    def _leaders_of(self, cluster_id: str) -> LeadersBuilder:
        if self._leaders is None:
            self._leaders = {}
        leaders = self._leaders.get(cluster_id)
        if leaders is None:
            leaders = self._leaders[cluster_id] = LeadersBuilder(self._cluster(cluster_id).leaders)
        return leaders

    # -- a run at a time, from columns ---------------------------------------------------------------------
    def register(self, cluster_ids: Sequence[str], regions: Sequence[str], bootstrap_servers: Sequence[str]) -> None:
        """Consecutive ``ClusterRegistered``, given as columns: each new cluster is added, each known one
        keeps its region and takes the last bootstrap servers of the run. The checks run over the run's
        distinct (cluster, region) pairs; when one fails, the rows are replayed one by one, so the error is
        that of the first row that does not fit. A group commit of many agents' (re-)registrations is one
        such run; when it only repeats what the image holds (agents registering again), it is checked in one
        pass over the run and changes nothing."""
        clusters = self._changed if self._changed is not None else self._base
        # The image's own map (never changed, so its registrations can be kept): does the run only repeat it?
        repeated = self._registrations.of(clusters) if self._changed is None else None
        if repeated is not None and repeated.issuperset(zip(cluster_ids, regions, bootstrap_servers, strict=True)):
            return
        regions_of: dict[str, str] = {}
        for cluster_id, region in dict.fromkeys(zip(cluster_ids, regions, strict=True)):
            existing = clusters.get(cluster_id)
            known = existing.region if existing is not None else regions_of.get(cluster_id, region)
            if known != region or (existing is not None and existing.state == "decommissioned"):
                for row in zip(cluster_ids, regions, bootstrap_servers, strict=True):
                    self.replay_registered(ClusterRegistered(*row))
                return
            regions_of[cluster_id] = region
        changed = []
        for cluster_id, servers in dict(zip(cluster_ids, bootstrap_servers, strict=True)).items():
            existing = clusters.get(cluster_id)
            if existing is None:
                changed.append(ClusterImage(cluster_id, regions_of[cluster_id], servers))
            elif existing.bootstrap_servers != servers:
                changed.append(evolve(existing, bootstrap_servers=servers))
        if changed:
            self._writable().update((c.cluster_id, c) for c in changed)
            self._touched.update(c.cluster_id for c in changed)

    def report_leaders(
        self,
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
        leaders: Sequence[str | None],
    ) -> None:
        """Consecutive ``PhysicalPartitionsReported``, given as columns: each partition's leader is set (or
        dropped, for None), in order. A snapshot of metadata version 2 or 3 holds one such record per partition;
        a run of one cluster and physical topic is one ``LeadersBuilder.set``."""
        for cluster_id, start, stop in runs_of(cluster_ids):
            current = self._leaders_of(cluster_id)
            columns = (physical_topics, physical_partitions, leaders)
            if stop - start < len(cluster_ids):  # several clusters: this one's slice
                columns = tuple(column[start:stop] for column in columns)  # type: ignore[assignment]  # same types
            topics, partitions, run = columns
            for physical_topic, first, last in runs_of(topics):
                current.set(physical_topic, partitions[first:last], run[first:last])

    def apply(self) -> Mapping[str, ClusterImage]:
        """The clusters after every replayed record: the base map itself when none changed."""
        if self._leaders:
            clusters = self._writable()
            for cluster_id, leaders in self._leaders.items():
                frozen = leaders.freeze()
                if frozen is not clusters[cluster_id].leaders:
                    clusters[cluster_id] = evolve(clusters[cluster_id], leaders=frozen)
        return self._changed if self._changed is not None else self._base

    def touched(self) -> tuple[set[str], Collection[str]]:
        """(clusters a cluster record changed, clusters whose leaders were reported): the names ``Touched`` holds."""
        return self._touched, self._leaders.keys() if self._leaders is not None else ()
